//! The thin layer between Redis and the cores: calls, keys, time and registration.

pub mod clock;
pub mod handler;
pub mod key;
pub mod load;
pub mod log_type;
pub mod metadata;
pub mod propagation;
pub mod stats;
pub mod string_state;
