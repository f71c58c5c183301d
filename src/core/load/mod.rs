//! Graded limiting by load: a service's health, reported by every instance, sets a level,
//! and each level admits a share of each priority class (seed 003's "分级限流", Sentinel's
//! system rules, Google's criticality classes). Plain Rust, no Redis types; the time and the
//! random draw are passed in.
//!
//! - [`priority`]: the four classes, and the share of each a level admits.
//! - [`factors`]: what instances report, how a factor aggregates over the fleet, and the two
//!   derived factors, `bbr` (Sentinel's check, past its trigger) and `admission` (envoy's
//!   success-rate throttling).
//! - [`policy`]: the levels, their thresholds and shares, hysteresis and hold; the default.
//! - [`levels`]: the state, how the level moves (up at once, down one level a hold, its
//!   shares easing), and the decision on a request.
//! - [`layout`]: the state as stored, a header a decision reads alone.
//! - [`gate`]: `RL.ALL`'s load gate, from the stored bytes.

pub mod factors;
pub mod gate;
pub mod layout;
pub mod levels;
pub mod policy;
pub mod priority;

// What the engine and the commands use.
pub use factors::{Admission, Aggregate, BbrTrigger, Report, DERIVED, REPORTED};
pub use gate::LoadGate;
pub use layout::is_load_length;
pub use levels::{LoadDecision, LoadState, Standing};
pub use policy::{
    parse_number, Level, LoadError, Policy, MAX_LEVELS, MAX_NAME_LEN, MAX_THRESHOLDS,
};
pub use priority::{Priority, PRIORITIES, WHOLE};

#[cfg(test)]
mod tests;
