//! redis-ratelimit: native rate-limiting commands for Redis, as a module.
//!
//! - `core`: the algorithms in plain Rust, with time passed in (no Redis types).
//! - `args`, `error`, `packed`: argument grammar, error replies and packed effect fields
//!   shared by all commands.
//! - `redis`: the thin layer to Redis (calls, keys, clock, registration).
//! - `commands`: one file per command, joining the three.

mod args;
mod commands;
mod core;
mod error;
mod packed;
mod redis;

// Redis' allocator in the module, so that Redis accounts for (and can limit) its memory;
// the system's in unit tests, which run outside Redis.
#[cfg(not(test))]
#[global_allocator]
static ALLOCATOR: redis_module::alloc::RedisAlloc = redis_module::alloc::RedisAlloc;
