//! A client of the redis-ratelimit module for Rust services: typed limiters and results
//! for every command (`CL.THROTTLE`, `RL.WINDOW`, `RL.LOG`, `RL.ALL`, the leases, `RL.TOP`,
//! the load gate), sync and async (tokio) over the `redis` crate, Cluster included, with
//! the production features of the Python and Node packages: a deadline on every call, a
//! failure policy with a circuit and a half-open probe, a deny cache, quota leases, metrics,
//! shadow mode, and a tower layer for axum, hyper and tonic.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use ratelimit_module::{AsyncRateLimiter, Config, Limiter, OnError, Options};
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let connection = client.get_multiplexed_async_connection().await?;
//! let limiter = AsyncRateLimiter::new(connection, Config::default().on_error(OnError::Allow));
//! let burst = Limiter::throttle("user:7", 4, 1, Duration::from_secs(1));
//! let decided = limiter.check(&[burst], Options::new()).await?;
//! if !decided.allowed {
//!     println!("retry in {:?}", decided.retry_after);
//! }
//! # Ok(())
//! # }
//! ```

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
pub use load::{LoadShedder, NOTHING_SHED};
pub use policy::{policy_name, Config};
pub use protocol::{
    command_words, counts_words, lease_words, millis, release_words, renew_words, report_words,
    result, top_keys, Algorithm, Counts, Kind, Lease, Limiter, LoadStanding, Options, Priority,
    RateLimit, Shortfall, TopKey, UnexpectedReply, UnknownPriority,
};
#[cfg(feature = "tokio")]
pub use quota::AsyncQuota;
pub use quota::{Ledger, Quota, Take};
pub use resilience::{monotonic, server_failed, Circuit, Clock, DenyCache, Error, OnError};

/// The README's examples, compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
