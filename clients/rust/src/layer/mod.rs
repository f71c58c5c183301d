//! Tower layers for axum, hyper and tonic:
//!
//! - [`RateLimitLayer`]: the caller's limits, in one call per request (429 with the IETF
//!   fields, 503 when shed by the load gate or the server fails under the policy);
//! - [`LoadSheddingLayer`]: load shedding by priority, the process's own limit and the
//!   fleet's level, with no call per request (503 when shed).
//!
//! Put the shedding layer outside the limits: a request shed by load then costs no call.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use ratelimit_module::http::request::Parts;
//! use ratelimit_module::layer::{LoadSheddingLayer, RateLimitLayer};
//! use ratelimit_module::load::LoadShedder;
//! use ratelimit_module::{redis, AsyncRateLimiter, Config, Limiter, OnError};
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let limiter = AsyncRateLimiter::connect(&client, Config::default().on_error(OnError::Allow)).await?;
//! // 10 a second per caller in bursts of 20, and 1,000 an hour: keys "rl:burst:<ip>", ...
//! let policies = vec![
//!     Limiter::rate("rl:burst:", 10, Duration::from_secs(1)).burst(20),
//!     Limiter::window("rl:hour:", 1_000, Duration::from_secs(3600)).named("hour"),
//! ];
//! let limits = RateLimitLayer::new(limiter.clone(), policies, |request: &Parts| {
//!     request.headers.get("x-api-key")?.to_str().ok().map(str::to_owned)
//! })?;
//! let shedding = LoadSheddingLayer::new(LoadShedder::builder(limiter, "load:api").build()?);
//! let app: axum::Router = axum::Router::new().layer(limits).layer(shedding);
//! # Ok(())
//! # }
//! ```

pub mod key;
mod limits;
mod response;
mod shedding;
mod wrapped;

pub use limits::{RateLimitLayer, RateLimitService};
pub use shedding::{LoadSheddingLayer, LoadSheddingService};
pub use wrapped::{Answering, Around, Wrapped};
