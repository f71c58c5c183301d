//! The rate-limiting layer: every request whose key the closure finds is checked against the
//! policies in one call (all or nothing), before the service runs.
//!
//! - Admitted: the service answers, with the IETF `RateLimit` and `RateLimit-Policy` fields.
//! - Refused by a limit: `429 Too Many Requests`, the fields and `Retry-After`.
//! - Shed by the load gate ([`RateLimitLayer::load_gate`]), refused by `OnError::Deny`
//!   while the server fails, or the server failing under `OnError::Raise`:
//!   `503 Service Unavailable` with `Retry-After`.
//! - In shadow mode ([`crate::Config::shadow`]), a refused request goes through, counted
//!   and logged.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::request::Parts;
use http::{Request, Response, StatusCode};
use redis::aio::ConnectionLike;
use tower_layer::Layer;
use tower_service::Service;

use super::response::{answer, limiter_answer};
use crate::asynchronous::AsyncRateLimiter;
use crate::fields::fields;
use crate::protocol::{Limiter, Options, Priority, RateLimit};
use crate::resilience::Error;

type KeyOf = dyn Fn(&Parts) -> Option<String> + Send + Sync;
type PriorityOf = dyn Fn(&Parts) -> Priority + Send + Sync;

/// What every clone of the layer and its services share.
struct Shared<C> {
    limiter: Arc<AsyncRateLimiter<C>>,
    policies: Arc<[Limiter]>,
    key: Arc<KeyOf>,
    load: Option<(String, Arc<PriorityOf>)>,
}

impl<C> Clone for Shared<C> {
    fn clone(&self) -> Self {
        Shared {
            limiter: self.limiter.clone(),
            policies: self.policies.clone(),
            key: self.key.clone(),
            load: self.load.clone(),
        }
    }
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
    shared: Shared<C>,
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
            shared: Shared {
                limiter,
                policies: policies.into(),
                key: Arc::new(key),
                load: None,
            },
        }
    }

    /// Adds graded limiting by load: the level of `service` (its instances' reports) sheds
    /// a share of each priority class, the request's class given by `priority`, decided in
    /// the same call as the limits. A layer cloned before keeps what it had.
    pub fn load_gate(
        mut self,
        service: impl Into<String>,
        priority: impl Fn(&Parts) -> Priority + Send + Sync + 'static,
    ) -> Self {
        self.shared.load = Some((service.into(), Arc::new(priority)));
        self
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
    shared: Shared<C>,
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
                Ok(decided) if decided.failed || decided.shed_level > 0 => Ok(limiter_answer(
                    answer(StatusCode::SERVICE_UNAVAILABLE, decided.retry_after),
                )),
                Ok(decided) => {
                    let mut response = answer(StatusCode::TOO_MANY_REQUESTS, None);
                    set_fields(response.headers_mut(), &decided, &limiters);
                    Ok(limiter_answer(response))
                }
                Err(Error::Unavailable { retry_after, .. }) => Ok(limiter_answer(answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    Some(retry_after),
                ))),
                Err(error) if error.is_server_failure() => Ok(limiter_answer(answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    Some(Duration::from_secs(1)),
                ))),
                Err(error) => {
                    tracing::error!(%error, "ratelimit: the check failed");
                    Ok(answer(StatusCode::INTERNAL_SERVER_ERROR, None))
                }
            }
        })
    }
}
