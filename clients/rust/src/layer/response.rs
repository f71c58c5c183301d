//! The answers the layers give without the service: a status, and `Retry-After` when the
//! caller should come back; and the mark that tells the load-shedding layer a response is the
//! rate limiter's own answer, not the service's.

use std::time::Duration;

use http::header::{HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};

use crate::fields::seconds;

/// An empty response of `status`, with `Retry-After` in whole seconds (at least 1).
pub fn answer<B: Default>(status: StatusCode, retry_after: Option<Duration>) -> Response<B> {
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

/// In a response's extensions: the rate limiter answered it (a limit's refusal, its failure
/// policy's 503, a load gate's shed), not the service. The load-shedding layer counts such a
/// response as nothing of the service's health: counted, a server outage would read as the
/// service failing, raise the fleet's level and shed the service once the server is back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LimiterAnswer;

/// `response`, marked as the rate limiter's own answer.
pub(crate) fn limiter_answer<B>(mut response: Response<B>) -> Response<B> {
    response.extensions_mut().insert(LimiterAnswer);
    response
}

/// Whether `response` is the rate limiter's own answer.
pub(crate) fn is_limiter_answer<B>(response: &Response<B>) -> bool {
    response.extensions().get::<LimiterAnswer>().is_some()
}
