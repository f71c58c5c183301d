//! The thin layer between Redis and the cores: calls, keys, time and registration.

pub mod clock;
pub mod command_local;
pub mod engine;
pub mod handler;
pub mod key;
pub mod load;
pub mod metadata;
pub mod native_type;
pub mod propagation;
pub mod settings;
pub mod stats;
