//! A tower [`Layer`] for axum, hyper and tonic: every request whose key the closure finds
//! is checked against the policies in one call (all or nothing), before the service runs.
//!
//! - Admitted: the service answers, with the IETF `RateLimit` and `RateLimit-Policy` fields.
//! - Refused by a limit: `429 Too Many Requests`, the fields and `Retry-After`.
//! - Shed by the load gate ([`RateLimitLayer::load_gate`]), refused by `OnError::Deny`
//!   while the server fails, or the server failing under `OnError::Raise`:
//!   `503 Service Unavailable` with `Retry-After`.
//! - In shadow mode ([`crate::Config::shadow`]), a refused request goes through, counted
//!   and logged.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use ratelimit_module::layer::RateLimitLayer;
//! use ratelimit_module::{AsyncRateLimiter, Config, Limiter, OnError};
//!
//! let connection = redis::Client::open("redis://127.0.0.1/")?
//!     .get_multiplexed_async_connection()
//!     .await?;
//! let limiter = AsyncRateLimiter::shared(connection, Config::default().on_error(OnError::Allow));
//! // 10 a second per caller in bursts of 20, and 1,000 an hour: keys "rl:burst:<ip>", ...
//! let policies = vec![
//!     Limiter::throttle("rl:burst:", 19, 10, Duration::from_secs(1)),
//!     Limiter::window("rl:hour:", 1_000, Duration::from_secs(3600)).named("hour"),
//! ];
//! let layer = RateLimitLayer::new(limiter, policies, |request: &http::request::Parts| {
//!     request.headers.get("x-api-key")?.to_str().ok().map(str::to_owned)
//! });
//! let app: axum::Router = axum::Router::new().layer(layer);
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::request::Parts;
use http::{Request, Response, StatusCode};
use redis::aio::ConnectionLike;
use tower_layer::Layer;
use tower_service::Service;

use crate::asynchronous::AsyncRateLimiter;
use crate::fields::{fields, seconds};
use crate::protocol::{Limiter, Options, Priority, RateLimit};
use crate::resilience::Error;

type KeyOf = dyn Fn(&Parts) -> Option<String> + Send + Sync;
type PriorityOf = dyn Fn(&Parts) -> Priority + Send + Sync;

struct Shared<C> {
    limiter: Arc<AsyncRateLimiter<C>>,
    policies: Vec<Limiter>,
    key: Box<KeyOf>,
    load: Option<(String, Box<PriorityOf>)>,
}

impl<C> Shared<C> {
    /// The request's limiters: each policy on its key prefix followed by the request's key,
    /// then the load gate.
    fn limiters(&self, key: &str, request: &Parts) -> Vec<Limiter> {
        let mut limiters: Vec<Limiter> = self
            .policies
            .iter()
            .map(|policy| Limiter {
                key: format!("{}{key}", policy.key),
                ..policy.clone()
            })
            .collect();
        if let Some((service, priority)) = &self.load {
            limiters.push(Limiter::load(service.clone(), priority(request)));
        }
        limiters
    }
}

/// The layer: see the module's documentation.
pub struct RateLimitLayer<C> {
    shared: Arc<Shared<C>>,
}

impl<C> Clone for RateLimitLayer<C> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<C> RateLimitLayer<C> {
    /// Checks `policies` through `limiter` for every request `key` finds a key for (`None`:
    /// not limited). Each policy's key is the prefix the request's key follows; on a
    /// Cluster, give several policies' keys one hash slot (a key like `{203.0.113.7}`).
    pub fn new(
        limiter: Arc<AsyncRateLimiter<C>>,
        policies: Vec<Limiter>,
        key: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        RateLimitLayer {
            shared: Arc::new(Shared {
                limiter,
                policies,
                key: Box::new(key),
                load: None,
            }),
        }
    }

    /// Adds graded limiting by load: the level of `service` (its instances' reports) sheds
    /// a share of each priority class, the request's class given by `priority`, decided in
    /// the same call as the limits.
    pub fn load_gate(
        self,
        service: impl Into<String>,
        priority: impl Fn(&Parts) -> Priority + Send + Sync + 'static,
    ) -> Self {
        let shared = Arc::try_unwrap(self.shared)
            .unwrap_or_else(|_| panic!("load_gate is set before the layer is cloned"));
        RateLimitLayer {
            shared: Arc::new(Shared {
                load: Some((service.into(), Box::new(priority))),
                ..shared
            }),
        }
    }
}

impl<S, C> Layer<S> for RateLimitLayer<C> {
    type Service = RateLimitService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service the layer wraps around another.
pub struct RateLimitService<S, C> {
    inner: S,
    shared: Arc<Shared<C>>,
}

impl<S: Clone, C> Clone for RateLimitService<S, C> {
    fn clone(&self) -> Self {
        RateLimitService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

fn set_fields(headers: &mut http::HeaderMap, decided: &RateLimit, limiters: &[Limiter]) {
    for (name, value) in fields(decided, limiters) {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(lower(name)), value);
        }
    }
}

fn lower(name: &'static str) -> &'static str {
    match name {
        "RateLimit-Policy" => "ratelimit-policy",
        "RateLimit" => "ratelimit",
        _ => "retry-after",
    }
}

fn answer<B: Default>(status: StatusCode, retry_after: Option<Duration>) -> Response<B> {
    let mut response = Response::new(B::default());
    *response.status_mut() = status;
    if let Some(retry_after) = retry_after {
        let value = seconds(retry_after).max(1).to_string();
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(RETRY_AFTER, value);
        }
    }
    response
}

impl<S, C, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S, C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    C: ConnectionLike + Clone + Send + Sync + 'static,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service polled ready is the one that serves: a fresh clone stays behind.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let Some(key) = (shared.key)(&parts) else {
                return inner.call(Request::from_parts(parts, body)).await;
            };
            let limiters = shared.limiters(&key, &parts);
            let decided = shared.limiter.check(&limiters, Options::new()).await;
            match decided {
                Ok(decided) if decided.allowed => {
                    let mut response = inner.call(Request::from_parts(parts, body)).await?;
                    if !decided.failed {
                        set_fields(response.headers_mut(), &decided, &limiters);
                    }
                    Ok(response)
                }
                Ok(decided) if decided.failed || decided.shed_level > 0 => {
                    Ok(answer(StatusCode::SERVICE_UNAVAILABLE, decided.retry_after))
                }
                Ok(decided) => {
                    let mut response = answer(StatusCode::TOO_MANY_REQUESTS, None);
                    set_fields(response.headers_mut(), &decided, &limiters);
                    Ok(response)
                }
                Err(Error::Unavailable { retry_after, .. }) => {
                    Ok(answer(StatusCode::SERVICE_UNAVAILABLE, Some(retry_after)))
                }
                Err(error) if error.is_server_failure() => Ok(answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    Some(Duration::from_secs(1)),
                )),
                Err(error) => {
                    eprintln!("rate limiter: {error}");
                    Ok(answer(StatusCode::INTERNAL_SERVER_ERROR, None))
                }
            }
        })
    }
}
