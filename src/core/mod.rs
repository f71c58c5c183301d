//! The algorithms, in plain Rust: no Redis types, and the time passed in by the caller (the
//! injectable clock), so that unit and property tests can drive them along any timeline.

pub mod codec;
pub mod gcra;
pub mod log;
pub mod time;
pub mod verdict;
pub mod window;

#[cfg(test)]
mod tests;
