//! redis-ratelimit: native rate-limiting commands for Redis, as a module.
//!
//! - `core`: the algorithms in plain Rust, with time passed in (no Redis types).
//! - `args`, `error`: argument grammar and error replies shared by all commands.
//! - `redis`: the thin layer to Redis (calls, keys, clock, registration).
//! - `commands`: one file per command, joining the three.

mod args;
mod commands;
mod core;
mod error;
mod redis;

use redis_module::{raw, redis_module, Context, RedisString, Status};

use redis::log_type::LOG_TYPE;

// Redis' allocator in the module, so that Redis accounts for (and can limit) its memory;
// the system's in unit tests, which run outside Redis.
#[cfg(not(test))]
use redis_module::alloc::RedisAlloc as ModuleAllocator;
#[cfg(test)]
use std::alloc::System as ModuleAllocator;

/// The version `MODULE LIST` shows: major * 10000 + minor * 100 + patch.
const MODULE_VERSION: i32 = 100;

/// Whether the server provides every API function the commands call. Redis 7.0 and newer,
/// and Valkey, do.
fn server_api_complete() -> bool {
    macro_rules! all_present {
        ($($function:ident),* $(,)?) => {
            // SAFETY: copies of function pointers Redis filled in at load.
            true $(&& unsafe { raw::$function }.is_some())*
        };
    }
    all_present!(
        RedisModule_CreateCommand,
        RedisModule_SetModuleOptions,
        RedisModule_StringPtrLen,
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ValueLength,
        RedisModule_StringDMA,
        RedisModule_StringTruncate,
        RedisModule_DeleteKey,
        RedisModule_SetAbsExpire,
        RedisModule_Replicate,
        RedisModule_SignalModifiedKey,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithError,
        RedisModule_WrongArity,
        RedisModule_ReplyWithSimpleString,
        RedisModule_GetContextFlags,
        RedisModule_ReplicateVerbatim,
        RedisModule_ModuleTypeGetType,
        RedisModule_ModuleTypeGetValue,
        RedisModule_ModuleTypeSetValue,
        RedisModule_SaveUnsigned,
        RedisModule_LoadUnsigned,
        RedisModule_SaveStringBuffer,
        RedisModule_LoadStringBuffer,
        RedisModule_IsIOError,
        RedisModule_Free,
        RedisModule_EmitAOF,
        RedisModule_DigestAddStringBuffer,
        RedisModule_DigestEndSequence,
    )
}

fn initialize(ctx: &Context, args: &[RedisString]) -> Status {
    if !server_api_complete() {
        ctx.log_warning("ratelimit: this server lacks module API functions the commands need (Redis 7.0 or newer, or Valkey, is required)");
        return Status::Err;
    }
    // Keys are signalled as modified (to WATCH and client tracking) only when a command
    // actually writes them, not whenever one is opened for writing.
    unsafe {
        raw::RedisModule_SetModuleOptions.unwrap()(
            ctx.ctx,
            raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as i32,
        )
    };
    redis::handler::log_panics_to_redis();
    let mut debug_commands = false;
    for arg in args {
        if arg
            .as_slice()
            .eq_ignore_ascii_case(commands::debug::ENABLING_ARGUMENT.as_bytes())
        {
            debug_commands = true;
        } else {
            ctx.log_warning("ratelimit: unknown module argument (the only one is debug-commands)");
            return Status::Err;
        }
    }
    let debug_specs: &[&redis::metadata::CommandSpec] = if debug_commands {
        &[&commands::debug::PANIC_SPEC]
    } else {
        &[]
    };
    redis::propagation::watch(ctx.ctx);
    let module_category = redis::metadata::add_module_acl_category(ctx.ctx);
    for spec in commands::ALL.iter().chain(debug_specs) {
        if let Err(reason) = redis::metadata::register(ctx.ctx, spec) {
            ctx.log_warning(reason);
            return Status::Err;
        }
        if let Err(reason) = redis::metadata::describe(ctx.ctx, spec, module_category) {
            ctx.log_warning(reason);
        }
    }
    if let Err(reason) = redis::stats::register_info(ctx.ctx, &commands::STATS) {
        ctx.log_warning(reason);
    }
    Status::Ok
}

redis_module! {
    name: "ratelimit",
    version: MODULE_VERSION,
    allocator: (ModuleAllocator, ModuleAllocator),
    data_types: [LOG_TYPE],
    init: initialize,
    commands: [],
}
