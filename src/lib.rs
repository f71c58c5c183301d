//! redis-ratelimit: native rate-limiting commands for Redis and Valkey, as a module.
//!
//! - [`core`]: the algorithms and the engine that runs them, in plain Rust: no server types,
//!   no unsafe code, the time passed in.
//! - [`redis`]: the FFI layer, the only place that calls the module API: registration, the
//!   command callback, keys, effects, the native type, the server's settings.
//! - [`commands`]: one file per command, from arguments to the engine and back.
//! - [`options`], [`error`]: the option grammar and the error replies all commands share.
//!
//! docs/internals.md maps the path of a call through them.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod commands;
mod core;
mod error;
mod options;
mod redis;

// What Redis calls when it loads the module: every command of the table ([`commands`])
// registered through the FFI layer, which knows no command of its own.
redis::startup::export_on_load!(commands::Commands);

// The server's allocator in the module, so that it accounts for (and can limit) its
// memory; the system's in unit tests, which run outside the server.
#[cfg(not(test))]
#[global_allocator]
static ALLOCATOR: redis_module::alloc::RedisAlloc = redis_module::alloc::RedisAlloc;
