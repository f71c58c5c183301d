//! The FFI layer: every call into the server's module API goes through [`api`], one typed
//! function per API; around it, a small safe API the commands use (the call and its replies
//! in [`call`] and [`handler`], keys in [`key`], what writes send to replicas in [`effects`],
//! the engine's store in [`store`]), with a `SAFETY` comment on every `unsafe` block.

pub mod api;
pub mod call;
pub mod clock;
pub mod command_local;
pub mod effects;
pub mod handler;
pub mod key;
pub mod load;
pub mod metadata;
pub mod native_type;
pub mod propagation;
pub mod random;
pub mod settings;
pub mod stats;
pub mod store;
pub mod top;
