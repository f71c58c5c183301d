//! Ready-made keys for [`RateLimitLayer::new`](super::RateLimitLayer::new), as
//! tower_governor's key extractors: the peer's IP address, the client's address behind a
//! proxy, a header's value, one key for every request. Each is a function of the request's
//! head; `None` leaves the request unlimited.
//!
//! The peer's address is what the server put in the request's extensions: axum's
//! `ConnectInfo<SocketAddr>` (serve the router with
//! `into_make_service_with_connect_info::<SocketAddr>()`), or a plain [`SocketAddr`] that a
//! hyper or tonic service inserts itself. A request without one is not limited, and the
//! first such request is logged (a `tracing` warning), since the limit then does nothing.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};

use http::request::Parts;
use http::HeaderName;

/// The peer's IP address, from the server's connection: the key of a service that clients
/// reach directly.
pub fn peer_ip() -> impl Fn(&Parts) -> Option<String> + Send + Sync + Clone + 'static {
    |request: &Parts| peer_address(request).map(|ip| ip.to_string())
}

/// The client's IP address behind a proxy: the first address of `X-Forwarded-For`, else
/// `X-Real-IP`, else `Forwarded`'s `for=`, else the peer's (tower_governor's
/// `SmartIpKeyExtractor`). Only behind a proxy that sets these fields: a client can write
/// them itself.
pub fn client_ip() -> impl Fn(&Parts) -> Option<String> + Send + Sync + Clone + 'static {
    |request: &Parts| {
        forwarded_address(request)
            .or_else(|| peer_address(request))
            .map(|ip| ip.to_string())
    }
}

/// The value of the `name` field (an API key, a tenant), when it is present and text.
///
/// # Errors
///
/// A name that is not a valid field name ([`http::header::InvalidHeaderName`]).
pub fn header(
    name: &str,
) -> Result<
    impl Fn(&Parts) -> Option<String> + Send + Sync + Clone + 'static,
    http::header::InvalidHeaderName,
> {
    let name = HeaderName::try_from(name)?;
    Ok(move |request: &Parts| {
        let value = request.headers.get(&name)?.to_str().ok()?;
        (!value.is_empty()).then(|| value.to_owned())
    })
}

/// One key for every request: a limit the whole service shares.
pub fn global() -> impl Fn(&Parts) -> Option<String> + Send + Sync + Clone + 'static {
    |_: &Parts| Some("global".to_owned())
}

static WARNED: AtomicBool = AtomicBool::new(false);

fn peer_address(request: &Parts) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = request
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(info.0.ip());
    }
    if let Some(address) = request.extensions.get::<SocketAddr>() {
        return Some(address.ip());
    }
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "ratelimit: no peer address in the request's extensions: serve axum with \
             into_make_service_with_connect_info::<SocketAddr>(), or insert a SocketAddr; \
             requests without one are not limited"
        );
    }
    None
}

fn forwarded_address(request: &Parts) -> Option<IpAddr> {
    let field = |name: &str| request.headers.get(name)?.to_str().ok();
    if let Some(first) = field("x-forwarded-for").and_then(|list| list.split(',').next()) {
        if let Ok(ip) = first.trim().parse() {
            return Some(ip);
        }
    }
    if let Some(ip) = field("x-real-ip").and_then(|value| value.trim().parse().ok()) {
        return Some(ip);
    }
    let forwarded = field("forwarded")?;
    forwarded
        .split([';', ','])
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| name.eq_ignore_ascii_case("for"))
        .and_then(|(_, value)| forwarded_node(value))
}

/// A `Forwarded` node's address: `192.0.2.60`, `"[2001:db8::1]:4711"`, `192.0.2.60:80`.
fn forwarded_node(value: &str) -> Option<IpAddr> {
    let value = value.trim().trim_matches('"');
    if let Some(bracketed) = value.strip_prefix('[') {
        return bracketed.split(']').next()?.parse().ok();
    }
    value
        .parse()
        .ok()
        .or_else(|| value.parse::<SocketAddr>().ok().map(|address| address.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(fields: &[(&str, &str)], peer: Option<SocketAddr>) -> Parts {
        let mut builder = http::Request::builder();
        for (name, value) in fields {
            builder = builder.header(*name, *value);
        }
        let (mut parts, ()) = builder.body(()).unwrap().into_parts();
        if let Some(peer) = peer {
            parts.extensions.insert(peer);
        }
        parts
    }

    #[test]
    fn the_peer_ip_comes_from_the_connection() {
        let peer: SocketAddr = "198.51.100.7:50000".parse().unwrap();
        assert_eq!(
            peer_ip()(&head(&[], Some(peer))).as_deref(),
            Some("198.51.100.7")
        );
        let spoofed = head(&[("x-forwarded-for", "203.0.113.9")], Some(peer));
        assert_eq!(peer_ip()(&spoofed).as_deref(), Some("198.51.100.7"));
        assert_eq!(peer_ip()(&head(&[], None)), None);
    }

    #[test]
    fn the_client_ip_behind_a_proxy_comes_from_its_fields_then_the_peer() {
        let peer: SocketAddr = "10.0.0.2:443".parse().unwrap();
        let client = client_ip();
        let read = |fields: &[(&str, &str)]| client(&head(fields, Some(peer)));
        let forwarded_for = [("x-forwarded-for", "203.0.113.9, 10.0.0.1")];
        assert_eq!(read(&forwarded_for).as_deref(), Some("203.0.113.9"));
        assert_eq!(
            read(&[("x-real-ip", "2001:db8::7")]).as_deref(),
            Some("2001:db8::7")
        );
        let forwarded = [("forwarded", "proto=https;for=\"[2001:db8::1]:4711\"")];
        assert_eq!(read(&forwarded).as_deref(), Some("2001:db8::1"));
        let with_port = [("forwarded", "for=192.0.2.60:80;by=203.0.113.43")];
        assert_eq!(read(&with_port).as_deref(), Some("192.0.2.60"));
        assert_eq!(
            read(&[("x-forwarded-for", "unknown")]).as_deref(),
            Some("10.0.0.2")
        );
    }

    #[test]
    fn a_header_key_is_its_text_and_a_bad_name_an_error() {
        let key = header("X-Api-Key").unwrap();
        assert_eq!(
            key(&head(&[("x-api-key", "k-1")], None)).as_deref(),
            Some("k-1")
        );
        assert_eq!(key(&head(&[("x-api-key", "")], None)), None);
        assert_eq!(key(&head(&[], None)), None);
        assert!(header("bad name").is_err());
        assert_eq!(global()(&head(&[], None)).as_deref(), Some("global"));
    }
}
