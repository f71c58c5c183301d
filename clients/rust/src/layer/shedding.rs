//! The load-shedding layer: every request is admitted or shed by a [`LoadShedder`] (the
//! process's own limit and the fleet's level) before the service runs, by its priority.
//!
//! - Admitted: the service answers; the request is counted in flight until its response is
//!   made (or the call is dropped), with its latency and status. A response the rate-limit
//!   layer made inside this one (a refusal, its failure policy's 503) and any 429 say nothing
//!   of the service's health: the request only leaves the requests in flight.
//! - Shed: `503 Service Unavailable` with `Retry-After` (one report interval).
//!
//! The priority is the `x-priority` field by default (`critical_plus`, `critical`,
//! `sheddable_plus`, `sheddable`), `sheddable` when it is missing or names no class; or
//! whatever [`LoadSheddingLayer::priority`] finds. The shedder starts reporting at the first
//! request.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use http::request::Parts;
use http::{Request, Response, StatusCode};
use redis::aio::ConnectionLike;
use tower_layer::Layer;
use tower_service::Service;

use super::response::{answer, is_limiter_answer};
use super::wrapped::{Answering, Around, Wrapped};
use crate::load::{LoadShedder, Ticket};
use crate::protocol::Priority;

type PriorityOf = dyn Fn(&Parts) -> Priority + Send + Sync;

/// The priority in the `x-priority` field; `sheddable` when missing or unknown.
fn from_header(request: &Parts) -> Priority {
    request
        .headers
        .get("x-priority")
        .and_then(|value| value.to_str().ok())
        .and_then(|name| name.parse().ok())
        .unwrap_or(Priority::Sheddable)
}

/// The layer: see the module's documentation.
pub struct LoadSheddingLayer<C> {
    shedder: Arc<LoadShedder<C>>,
    priority: Arc<PriorityOf>,
}

impl<C> Clone for LoadSheddingLayer<C> {
    fn clone(&self) -> Self {
        LoadSheddingLayer {
            shedder: self.shedder.clone(),
            priority: self.priority.clone(),
        }
    }
}

impl<C> LoadSheddingLayer<C> {
    /// Sheds through `shedder`, each request's priority from its `x-priority` field.
    pub fn new(shedder: Arc<LoadShedder<C>>) -> Self {
        LoadSheddingLayer {
            shedder,
            priority: Arc::new(from_header),
        }
    }

    /// Takes each request's priority from `priority` instead (a route, a caller's plan).
    pub fn priority(
        mut self,
        priority: impl Fn(&Parts) -> Priority + Send + Sync + 'static,
    ) -> Self {
        self.priority = Arc::new(priority);
        self
    }
}

impl<C> fmt::Debug for LoadSheddingLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadSheddingLayer")
            .field("shedder", &self.shedder)
            .finish_non_exhaustive()
    }
}

/// The service the layer wraps around another.
pub type LoadSheddingService<S, C> = Wrapped<S, LoadSheddingLayer<C>>;

impl<S, C> Layer<S> for LoadSheddingLayer<C> {
    type Service = LoadSheddingService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Wrapped::new(inner, self.clone())
    }
}

/// The route a request takes, for the process's limit to keep its latency apart: its method
/// and the pattern axum's router matched, where the layer is on the router's routes
/// (`Router::layer`, which routes first); its path where no pattern is known (a layer around
/// the whole service, hyper's or tonic's).
fn route_of(parts: &Parts) -> String {
    #[cfg(feature = "axum")]
    if let Some(matched) = parts.extensions.get::<axum::extract::MatchedPath>() {
        return format!("{} {}", parts.method, matched.as_str());
    }
    format!("{} {}", parts.method, parts.uri.path())
}

/// A request's waits on the rate-limit server: how many are going on, and whether the request
/// finished (a wait that ends after it tells nothing).
#[derive(Debug, Default)]
struct Waits {
    going: u32,
    done: bool,
}

/// What a request the shedder counts in flight shares with the rate-limiting layer inside this
/// one: its ticket and its waits on the server, in one allocation (a ticket the shedder does
/// not count has no waits to tell, and none is made).
struct Counted<C> {
    shedder: Arc<LoadShedder<C>>,
    ticket: Ticket,
    waits: Mutex<Waits>,
}

impl<C> Counted<C> {
    fn waits(&self) -> MutexGuard<'_, Waits> {
        self.waits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The request ends: one still waiting on the server is in flight again, to leave as it
    /// ends.
    fn settle(&self) {
        let mut waits = self.waits();
        if waits.going > 0 && !waits.done {
            self.shedder.waiting(&self.ticket, false);
        }
        waits.done = true;
    }
}

/// A request's waits on the server, told by the rate-limiting layer ([`ServerWaits`]).
trait TellWaits: Send + Sync {
    /// A wait begins (`begins`) or ends.
    fn waiting(&self, begins: bool);
}

impl<C: Send + Sync> TellWaits for Counted<C> {
    fn waiting(&self, begins: bool) {
        let mut waits = self.waits();
        // The first wait to begin leaves, the last to end comes back; none once it finished.
        if begins {
            waits.going += 1;
        } else {
            waits.going = waits.going.saturating_sub(1);
        }
        if !waits.done && waits.going == u32::from(begins) {
            self.shedder.waiting(&self.ticket, begins);
        }
    }
}

/// In a request's extensions, from the load-shedding layer: what the rate-limiting layer
/// inside it tells as the request begins and ends a wait on the rate-limit server, so that the
/// request leaves the process's requests in flight meanwhile ([`LoadShedder::waiting`]).
#[derive(Clone)]
pub(crate) struct ServerWaits(Arc<dyn TellWaits>);

impl ServerWaits {
    /// A wait begins; it ends when the guard is dropped (the call answered, or abandoned).
    pub(crate) fn begin(&self) -> WaitingOnServer {
        self.0.waiting(true);
        WaitingOnServer(self.clone())
    }
}

/// A wait on the rate-limit server going on ([`ServerWaits::begin`]).
pub(crate) struct WaitingOnServer(ServerWaits);

impl Drop for WaitingOnServer {
    fn drop(&mut self) {
        (self.0).0.waiting(false);
    }
}

/// The ticket of a request admitted and not yet answered.
enum Held<C> {
    /// Counted in flight, its waits told.
    Counted(Arc<Counted<C>>),
    /// Not counted (no local limit, or one that refused it in shadow mode): nothing to tell of
    /// its waits.
    Uncounted(Arc<LoadShedder<C>>, Ticket),
}

/// A request admitted and not yet answered: finished with its status, or as abandoned
/// (499) when the call is dropped first.
struct InFlight<C> {
    held: Option<Held<C>>,
    /// Its route, whose latency the process's limit keeps apart ([`route_of`]).
    route: String,
}

impl<C> InFlight<C>
where
    C: Send + Sync + 'static,
{
    fn new(shedder: Arc<LoadShedder<C>>, ticket: Ticket, route: String) -> Self {
        let held = if ticket.counted() {
            Held::Counted(Arc::new(Counted {
                shedder,
                ticket,
                waits: Mutex::default(),
            }))
        } else {
            Held::Uncounted(shedder, ticket)
        };
        InFlight {
            held: Some(held),
            route,
        }
    }

    /// What the rate-limiting layer tells of this request's waits on the server: nothing for
    /// a ticket not counted.
    fn server_waits(&self) -> Option<ServerWaits> {
        match &self.held {
            Some(Held::Counted(counted)) => Some(ServerWaits(counted.clone())),
            _ => None,
        }
    }
}

impl<C> InFlight<C> {
    /// Ends the request (once): `end` is given its shedder and ticket, after a wait still
    /// going on came back.
    fn end(&mut self, end: impl FnOnce(&LoadShedder<C>, Ticket, &str)) {
        match self.held.take() {
            Some(Held::Counted(counted)) => {
                counted.settle();
                end(&counted.shedder, counted.ticket, &self.route);
            }
            Some(Held::Uncounted(shedder, ticket)) => end(&shedder, ticket, &self.route),
            None => {}
        }
    }

    fn finish(mut self, status: u16) {
        self.end(|shedder, ticket, route| shedder.finished_route(ticket, status, route));
    }

    fn finish_by_limiter(mut self) {
        self.end(|shedder, ticket, _| shedder.finished_by_limiter(ticket));
    }
}

impl<C> Drop for InFlight<C> {
    fn drop(&mut self) {
        self.end(|shedder, ticket, route| shedder.finished_route(ticket, 499, route));
    }
}

impl<S, C, ReqBody, ResBody> Around<S, ReqBody> for LoadSheddingLayer<C>
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
        let shedder = self.shedder.clone();
        shedder.start();
        let (parts, body) = request.into_parts();
        let priority = (self.priority)(&parts);
        let admitted = shedder.admit(priority);
        Box::pin(async move {
            let Some(ticket) = admitted else {
                let retry_after = shedder.retry_after();
                return Ok(answer(StatusCode::SERVICE_UNAVAILABLE, Some(retry_after)));
            };
            let in_flight = InFlight::new(shedder, ticket, route_of(&parts));
            let mut parts = parts;
            if let Some(waits) = in_flight.server_waits() {
                parts.extensions.insert(waits);
            }
            let response = inner.call(Request::from_parts(parts, body)).await;
            match &response {
                // The rate limiter's answer (a layer inside this one) is not the service's.
                Ok(answered) if is_limiter_answer(answered) => in_flight.finish_by_limiter(),
                Ok(answered) => in_flight.finish(answered.status().as_u16()),
                Err(_) => in_flight.finish(500),
            }
            response
        })
    }
}
