//! The FFI layer: every call into the server's module API goes through [`api`], one typed
//! function per API; around it, a small safe API the commands use (the call and its replies
//! in [`call`] and [`handler`], keys in [`key`], what writes send to replicas in
//! [`replicate`], the engine's store in [`store`]), and the module's start-up in [`startup`],
//! with a `SAFETY` comment on every `unsafe` block.

pub mod api;
pub mod call;
pub mod clock;
pub mod handler;
pub mod key;
pub mod native_type;
pub mod random;
pub mod receivers;
pub mod registration;
pub mod replicate;
pub mod reused;
pub mod settings;
pub mod startup;
pub mod stats;
pub mod store;
pub mod top;
