//! The algorithms, in plain Rust: no Redis types, and the time passed in by the caller (the
//! injectable clock), so that unit and property tests can drive them along any timeline.

pub mod all;
pub mod block;
pub mod buckets;
pub mod codec;
pub mod gcra;
pub mod lease;
pub mod limiter;
pub mod log;
pub mod request;
pub mod ring;
pub mod time;
pub mod verdict;
pub mod window;

#[cfg(test)]
mod testing;

#[cfg(test)]
mod tests;
