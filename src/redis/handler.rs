//! The bridge from the server's command callback to a command's body: the arguments as byte
//! slices (no copies, no allocation), every panic caught before it can reach the server,
//! and the reply written only once the body has finished, so a reply is never left
//! half-built.
//!
//! A command is a [`Registered`] type whose [`CommandSpec`] names its body, a plain Rust
//! function of an [`Invocation`]; the server calls [`callback`] for it.

use std::cell::Cell;
use std::ffi::{c_int, CString};
use std::mem::MaybeUninit;
use std::panic::{self, AssertUnwindSafe};

use redis_module::raw;

use crate::core::engine::MAX_LIMITERS;
use crate::error::CommandError;
use crate::redis::call::{Invocation, Reply};
use crate::redis::metadata::{CommandSpec, Keys};
use crate::redis::stats::Outcome;

/// The most arguments any command accepts, counting its name; more is a wrong arity.
/// `RL.ALL` with 16 limiters of the longest form and every option takes about 110.
const MAX_ARGUMENTS: usize = 128;

/// A command the module registers, known by its description.
pub trait Registered {
    /// The command's description, with its body.
    const SPEC: &'static CommandSpec;
}

/// The C function the server calls for `R`'s command.
///
/// # Safety
/// Only the server calls it, as a command callback, with its context and arguments.
pub unsafe extern "C" fn callback<R: Registered>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: the server's own arguments to a command callback, passed on unchanged.
    unsafe { run(ctx, argv, argc, R::SPEC) }
}

/// Runs `spec`'s body for a call with `argc` arguments, counts the call in the command's
/// counters, and replies.
///
/// # Safety
/// `ctx`, `argv` and `argc` must come from the server's command callback.
unsafe fn run(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    spec: &'static CommandSpec,
) -> c_int {
    if let Keys::Counted(flags) = spec.keys {
        // SAFETY: the running command's context.
        if unsafe { raw::RedisModule_IsKeysPositionRequest.unwrap()(ctx) } != 0 {
            // SAFETY: as for this function, during a keys-position request.
            let _ = panic::catch_unwind(|| unsafe { report_counted_keys(ctx, argv, argc, flags) });
            return raw::Status::Ok as c_int;
        }
    }
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        let count = usize::try_from(argc).unwrap_or(0);
        if argv.is_null() || count < spec.min_arguments() || count > MAX_ARGUMENTS {
            return Err(CommandError::WrongArity);
        }
        // SAFETY: the server passes `argc` valid strings in `argv`.
        let argv = unsafe { std::slice::from_raw_parts(argv, count) };
        // Only the arguments given are filled: no zeroing of the whole array per call. The
        // command's name, and a single key, are never read as bytes: they stay empty.
        let mut bytes = [MaybeUninit::<&[u8]>::uninit(); MAX_ARGUMENTS];
        let first_read = match spec.keys {
            Keys::One(_) => 2,
            Keys::None | Keys::Counted(_) => 1,
        }
        .min(count);
        for slot in &mut bytes[..first_read] {
            slot.write(&[]);
        }
        for (slot, &arg) in bytes[first_read..count].iter_mut().zip(&argv[first_read..]) {
            // SAFETY: one of the call's arguments, alive for the call.
            slot.write(unsafe { string_bytes(arg) });
        }
        // SAFETY: the first `count` elements were just written.
        let args = unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<&[u8]>(), count) };
        let call = Invocation {
            ctx,
            event: spec.event,
            argv,
            args,
            flags: Cell::new(None),
        };
        (spec.body)(&call, spec.mode)
    }));
    let result = result.unwrap_or(Err(CommandError::INTERNAL));
    if let Some(stats) = spec.stats {
        stats.record(result.as_ref().map_or(Outcome::Error, Reply::outcome));
    }
    match result {
        Ok(reply) => reply.send(ctx),
        // SAFETY: the running command's context.
        Err(error) => unsafe { reply_error(ctx, error) },
    }
    raw::Status::Ok as c_int
}

/// Tells the server where the keys of a `numkeys key [key ...]` call are (for Cluster
/// routing, `CROSSSLOT`, ACL and `COMMAND GETKEYS`): none when `numkeys` is not a count of
/// keys the call has, in which case the command itself replies with the error.
///
/// # Safety
/// As for [`run`], during a keys-position request.
unsafe fn report_counted_keys(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    flags: u32,
) {
    let count = usize::try_from(argc).unwrap_or(0);
    if argv.is_null() || count < 2 {
        return;
    }
    // SAFETY: the server passes `argc` valid strings in `argv`.
    let argv = unsafe { std::slice::from_raw_parts(argv, count) };
    // SAFETY: an argument of the call.
    let numkeys = crate::args::parse_integer(unsafe { string_bytes(argv[1]) });
    let Some(keys) = numkeys
        .and_then(|keys| usize::try_from(keys).ok())
        .filter(|keys| (1..=MAX_LIMITERS).contains(keys) && 2 + keys <= count)
    else {
        return;
    };
    for position in 2..2 + keys {
        // SAFETY: the running command's context, during its keys-position request.
        unsafe {
            match raw::RedisModule_KeyAtPosWithFlags {
                Some(key_at) => key_at(ctx, position as c_int, flags as c_int),
                None => raw::RedisModule_KeyAtPos.unwrap()(ctx, position as c_int),
            }
        }
    }
}

/// The bytes of a server string, borrowed.
///
/// # Safety
/// `string` must be a live server string; the slice must not outlive it.
pub unsafe fn string_bytes<'a>(string: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0;
    // SAFETY: a live string, per the caller.
    let ptr = unsafe { raw::RedisModule_StringPtrLen.unwrap()(string, &mut len) };
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the server gives `len` readable bytes, alive as long as the string.
        unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
    }
}

/// Replies with `error`.
///
/// # Safety
/// `ctx` must be the running command's context.
unsafe fn reply_error(ctx: *mut raw::RedisModuleCtx, error: CommandError) {
    // SAFETY: per the caller; the messages are C strings.
    unsafe {
        match error {
            CommandError::WrongArity => {
                raw::RedisModule_WrongArity.unwrap()(ctx);
            }
            CommandError::Message(message) => {
                raw::RedisModule_ReplyWithError.unwrap()(ctx, message.as_ptr());
            }
        }
    }
}

/// Sends panic messages to the server's log (as data, never as a format string) instead of
/// its stderr, which may go nowhere.
pub fn log_panics_to_redis() {
    panic::set_hook(Box::new(|info| {
        let message = CString::new(format!("ratelimit module panic: {info}").replace('\0', " "))
            .unwrap_or_default();
        // SAFETY: a function pointer the server filled in at load; both strings are C strings.
        if let Some(log) = unsafe { raw::RedisModule_Log } {
            // SAFETY: as above; a null context logs under no module, which the server allows.
            unsafe {
                log(
                    std::ptr::null_mut(),
                    c"warning".as_ptr(),
                    c"%s".as_ptr(),
                    message.as_ptr(),
                )
            };
        }
    }));
}
