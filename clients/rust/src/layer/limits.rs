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

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::request::Parts;
use http::{Request, Response, StatusCode};
use redis::aio::ConnectionLike;
use tower_layer::Layer;
use tower_service::Service;

use super::response::{answer, limiter_answer};
use super::shedding::ServerWaits;
use super::wrapped::{Answering, Around, Wrapped};
use crate::asynchronous::AsyncRateLimiter;
use crate::fields::fields;
use crate::protocol::{validate, InvalidArgument, Limiter, Options, Priority, RateLimit};
use crate::resilience::Error;

type KeyOf = dyn Fn(&Parts) -> Option<String> + Send + Sync;
type PriorityOf = dyn Fn(&Parts) -> Priority + Send + Sync;

/// The layer: see the module's documentation. Every clone and every service it makes share
/// the limiter, the policies and the functions.
pub struct RateLimitLayer<C> {
    limiter: Arc<AsyncRateLimiter<C>>,
    policies: Arc<[Limiter]>,
    key: Arc<KeyOf>,
    load: Option<(String, Arc<PriorityOf>)>,
}

/// The service the layer wraps around another.
pub type RateLimitService<S, C> = Wrapped<S, RateLimitLayer<C>>;

impl<C> Clone for RateLimitLayer<C> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            limiter: self.limiter.clone(),
            policies: self.policies.clone(),
            key: self.key.clone(),
            load: self.load.clone(),
        }
    }
}

impl<C> fmt::Debug for RateLimitLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .field("policies", &self.policies)
            .field("load", &self.load.as_ref().map(|(service, _)| service))
            .finish_non_exhaustive()
    }
}

impl<C> RateLimitLayer<C> {
    /// Checks `policies` through `limiter` for every request `key` finds a key for (`None`:
    /// not limited; [`super::key`] has the common ones). Each policy's key is the prefix the
    /// request's key follows; on a Cluster, give several policies' keys one hash slot (a
    /// key like `{203.0.113.7}`).
    ///
    /// # Errors
    ///
    /// No policy, more than a call takes, or one the module would refuse
    /// ([`Limiter::validate`]): found here, not on every request.
    pub fn new(
        limiter: Arc<AsyncRateLimiter<C>>,
        policies: Vec<Limiter>,
        key: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Result<Self, InvalidArgument> {
        let layer = RateLimitLayer {
            limiter,
            policies: policies.into(),
            key: Arc::new(key),
            load: None,
        };
        layer.validate()?;
        Ok(layer)
    }

    /// Adds graded limiting by load: the level of `service` (its instances' reports) sheds
    /// a share of each priority class, the request's class given by `priority`, decided in
    /// the same call as the limits. A layer cloned before keeps what it had.
    ///
    /// # Errors
    ///
    /// An empty service key, or a gate beyond the limiters a call takes.
    pub fn load_gate(
        mut self,
        service: impl Into<String>,
        priority: impl Fn(&Parts) -> Priority + Send + Sync + 'static,
    ) -> Result<Self, InvalidArgument> {
        self.load = Some((service.into(), Arc::new(priority)));
        self.validate()?;
        Ok(self)
    }

    /// The policies, with the gate, as a request with some key would have them.
    fn validate(&self) -> Result<(), InvalidArgument> {
        let sample = self.limiters("k", |_| Priority::Sheddable);
        validate(&sample, &Options::new())
    }

    /// The request's limiters: each policy on its key prefix followed by the request's key,
    /// then the load gate.
    fn limiters(&self, key: &str, priority: impl Fn(&PriorityOf) -> Priority) -> Vec<Limiter> {
        let mut limiters: Vec<Limiter> = self
            .policies
            .iter()
            .map(|policy| {
                let mut limiter = policy.clone();
                limiter.key = format!("{}{key}", policy.key);
                limiter
            })
            .collect();
        if let Some((service, of)) = &self.load {
            limiters.push(Limiter::load(service.clone(), priority(of.as_ref())));
        }
        limiters
    }
}

impl<S, C> Layer<S> for RateLimitLayer<C> {
    type Service = RateLimitService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Wrapped::new(inner, self.clone())
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

impl<S, C, ReqBody, ResBody> Around<S, ReqBody> for RateLimitLayer<C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    C: ConnectionLike + Clone + Send + Sync + 'static,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Body = ResBody;

    fn around(&self, mut inner: S, request: Request<ReqBody>) -> Answering<ResBody, S::Error> {
        let layer = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let Some(key) = (layer.key)(&parts) else {
                return inner.call(Request::from_parts(parts, body)).await;
            };
            let limiters = layer.limiters(&key, |priority| priority(&parts));
            // A load-shedding layer outside this one leaves the request out of its requests in
            // flight while it waits on the server.
            let waiting = parts
                .extensions
                .get::<ServerWaits>()
                .map(ServerWaits::begin);
            let decided = layer.limiter.check(&limiters, Options::new()).await;
            drop(waiting);
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
