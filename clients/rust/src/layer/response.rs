//! The answers the layers give without the service: a status, and `Retry-After` when the
//! caller should come back.

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
