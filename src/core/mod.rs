//! The algorithms and the engine that runs them, in plain Rust: no Redis types, no unsafe
//! code, and the time passed in by the caller (the injectable clock), so that unit and
//! property tests can drive them along any timeline.
//!
//! - Time and the reply: [`time`], [`verdict`]; what a call asks: [`request`]; parameters:
//!   [`params`].
//! - The limiters: [`gcra`], [`windows`] (fixed, sliding, buckets), [`log`], [`lease`], on
//!   the storage of [`codec`] (string layouts) and [`ring`] (the native values).
//! - Rules every limiter shares: [`block`]; one decision for any limiter: [`limiter`].
//! - The engine: [`engine`] decides every limiter of a call, settles it ([`all_or_none`]) and
//!   commits it over a store of keys; [`effect`] is what each write sends to replicas and
//!   the AOF, and [`packed`] how an internal command's fields travel.

#![forbid(unsafe_code)]

pub mod all_or_none;
pub mod block;
pub mod codec;
pub mod effect;
pub mod engine;
pub mod gcra;
pub mod lease;
pub mod limiter;
pub mod load;
pub mod log;
pub mod packed;
pub mod params;
pub mod request;
pub mod ring;
pub mod siphash;
pub mod time;
pub mod top;
pub mod verdict;
pub mod windows;

#[cfg(test)]
mod testing;

#[cfg(test)]
mod tests;
