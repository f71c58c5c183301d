//! A client of the redis-ratelimit module for Rust services: typed limiters and results
//! for every command (`CL.THROTTLE`, `RL.WINDOW`, `RL.LOG`, `RL.ALL`, the leases, `RL.TOP`,
//! the load gate), sync and async (tokio) over the `redis` crate, Cluster included, with
//! the production features of the Python and Node packages: a deadline on every call, a
//! failure policy with a circuit and a half-open probe, a deny cache, quota leases, metrics,
//! shadow mode, and tower layers for axum, hyper and tonic.
//!
//! The package is `redis-ratelimit-module` (the name the Python and Node packages have);
//! the library is `ratelimit_module`, as they import it. The `redis` and `http` crates it
//! uses are re-exported ([`redis`], [`http`]), so that a service needs no version of its
//! own to make a connection or read a request.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use ratelimit_module::{redis, AsyncRateLimiter, Config, Limiter, OnError, Options};
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let limiter = AsyncRateLimiter::connect(&client, Config::default().on_error(OnError::Allow)).await?;
//! let burst = Limiter::rate("user:7", 1, Duration::from_secs(1)).burst(5);
//! let decided = limiter.check(&[burst], Options::new()).await?;
//! if !decided.allowed {
//!     println!("retry in {:?}", decided.retry_after);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Features: `tokio` (the async client, quota and load shedder), `tower` (the layers, with
//! `tokio`), `cluster` (Redis Cluster, the blocking client) and `cluster-async` (and the
//! async one, with `tokio`); all of them by default.

#![deny(missing_docs)]

mod blocking;
mod concurrency;
mod fields;
mod lists;
mod policy;
mod protocol;
mod quota;
mod resilience;
#[cfg(feature = "tokio")]
mod signals;

#[cfg(feature = "tokio")]
mod asynchronous;
#[cfg(feature = "tower")]
pub mod layer;
#[cfg(feature = "tokio")]
pub mod load;

#[cfg(feature = "tokio")]
pub use asynchronous::AsyncRateLimiter;
pub use blocking::{BlockingConnection, RateLimiter};
pub use concurrency::{ConcurrencyLimit, LimitOptions};
pub use fields::{fields, seconds};
#[cfg(feature = "tokio")]
pub use lists::SharedLists;
pub use lists::{add_words, parse_lists, remove_words, Lists};
#[cfg(feature = "tokio")]
pub use load::{LoadShedder, LocalLimit, NOTHING_SHED};
pub use policy::{policy_name, Config};
pub use protocol::{
    command_words, counts_words, lease_words, millis, release_words, renew_words, report_words,
    result, top_keys, top_words, validate, Algorithm, Counts, InvalidArgument, Kind, Lease,
    Limiter, LoadStanding, Options, Priority, RateLimit, Shortfall, TopKey, UnexpectedReply,
    UnknownPriority, MAX_LIMITERS,
};
#[cfg(feature = "tokio")]
pub use quota::AsyncQuota;
pub use quota::{Ledger, Quota, Take};
pub use resilience::{monotonic, Circuit, Clock, DenyCache, Error, Failure, OnError};

/// The redis crate this one is built on, for making connections with the same version.
pub use redis;

/// The http crate the layers read requests and write responses with.
#[cfg(feature = "tower")]
pub use http;

/// The README's examples, compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
