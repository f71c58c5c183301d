//! What both layers share: the service each wraps around another. It polls the inner service
//! and hands each request, with the service that was polled ready, to what the layer does
//! around it ([`Around`]), the one part in which the layers differ.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

/// A response to come: the inner service's, or the layer's own.
pub type Answering<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

/// What a layer does with a request around the service it wraps (the crate's layers
/// implement it; [`Wrapped`] calls it).
pub trait Around<S, ReqBody>: Clone + Send + 'static
where
    S: Service<Request<ReqBody>>,
{
    /// The inner service's response body.
    type Body;

    /// Answers `request`, calling `inner` (ready) or not.
    fn around(&self, inner: S, request: Request<ReqBody>) -> Answering<Self::Body, S::Error>;
}

/// The service a layer wraps around another (`RateLimitService`, `LoadSheddingService`).
pub struct Wrapped<S, L> {
    inner: S,
    layer: L,
}

impl<S, L> Wrapped<S, L> {
    pub(crate) fn new(inner: S, layer: L) -> Self {
        Wrapped { inner, layer }
    }
}

impl<S: Clone, L: Clone> Clone for Wrapped<S, L> {
    fn clone(&self) -> Self {
        Wrapped {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, L: fmt::Debug> fmt::Debug for Wrapped<S, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wrapped")
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

impl<S, L, ReqBody, ResBody> Service<Request<ReqBody>> for Wrapped<S, L>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    L: Around<S, ReqBody, Body = ResBody>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Answering<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service polled ready is the one that serves: a fresh clone stays behind.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        self.layer.around(inner, request)
    }
}
