//! The bridge from Redis' command callback to a command's body: arguments as byte slices
//! (no copies, no allocation), every panic caught before it can reach Redis, and the
//! reply written only once the body has finished, so a reply is never left half-built.

use std::cell::Cell;
use std::ffi::{c_int, CString};
use std::mem::MaybeUninit;
use std::panic::{self, AssertUnwindSafe};

use redis_module::raw;

use crate::core::request::{Action, Request};
use crate::error::CommandError;
use crate::redis::engine::MAX_LIMITERS;
use crate::redis::metadata::{CommandSpec, Keys};
use crate::redis::stats::Outcome;

/// The most arguments any command accepts, counting its name; more is a wrong arity.
/// `RL.ALL` with 16 limiters of the longest form and every option takes 104.
const MAX_ARGUMENTS: usize = 128;

/// One call of a command.
pub struct Invocation<'a> {
    /// The Redis context of the call.
    pub ctx: *mut raw::RedisModuleCtx,
    /// The command called.
    pub spec: &'static CommandSpec,
    /// The arguments as Redis strings, the command's name first.
    argv: &'a [*mut raw::RedisModuleString],
    /// The same arguments as bytes; the command's name, and the key of a single-key
    /// command, are left empty: they are only ever used as Redis strings.
    pub args: &'a [&'a [u8]],
    /// The context flags, once read.
    flags: Cell<Option<c_int>>,
}

impl Invocation<'_> {
    /// The first argument, which is the key of every single-key command of this module.
    pub fn key_name(&self) -> *mut raw::RedisModuleString {
        self.argv[1]
    }

    /// Argument `index` (0 is the command's name) as a Redis string.
    pub fn argument(&self, index: usize) -> *mut raw::RedisModuleString {
        self.argv[index]
    }

    /// The call's context flags (`RedisModule_GetContextFlags`), read once however many
    /// keys the call opens: they do not change during a call.
    pub fn context_flags(&self) -> c_int {
        if let Some(flags) = self.flags.get() {
            return flags;
        }
        // SAFETY: the running command's context.
        let flags = unsafe { raw::RedisModule_GetContextFlags.unwrap()(self.ctx) };
        self.flags.set(Some(flags));
        flags
    }
}

/// What a command's body replies when it succeeds.
pub trait Reply {
    /// Sends the reply.
    ///
    /// # Safety
    /// `ctx` must be the running command's context.
    unsafe fn send(self, ctx: *mut raw::RedisModuleCtx);

    /// How the call ended, for the command's counters.
    fn outcome(&self) -> Outcome {
        Outcome::Allowed
    }
}

/// Integers: the five `[limited, limit, remaining, retry_after, reset_after]`, or with a
/// lease id.
impl<const N: usize> Reply for [i64; N] {
    unsafe fn send(self, ctx: *mut raw::RedisModuleCtx) {
        unsafe {
            raw::RedisModule_ReplyWithArray.unwrap()(ctx, self.len() as _);
            let reply_with_integer = raw::RedisModule_ReplyWithLongLong.unwrap();
            for value in self {
                reply_with_integer(ctx, value);
            }
        }
    }
}

/// A limiter command's answer to a client: the five integers, optionally followed by each
/// limiter's own five (`RL.ALL ... DETAILS`), and what kind of request it answered.
pub struct LimiterReply {
    /// `[limited, limit, remaining, retry_after, reset_after]`.
    pub fields: [i64; 5],
    /// Each limiter's own five integers, in key order, when asked for.
    pub details: Option<Box<Details>>,
    /// What the request asked.
    pub request: Request,
}

/// Each limiter's own reply, in key order.
pub struct Details {
    /// The replies; the first `len` are used.
    pub fields: [[i64; 5]; MAX_LIMITERS],
    /// How many limiters.
    pub len: usize,
}

impl Reply for LimiterReply {
    unsafe fn send(self, ctx: *mut raw::RedisModuleCtx) {
        let Some(details) = self.details else {
            return unsafe { self.fields.send(ctx) };
        };
        unsafe {
            raw::RedisModule_ReplyWithArray.unwrap()(ctx, (5 + details.len) as _);
            for value in self.fields {
                raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, value);
            }
            for fields in &details.fields[..details.len] {
                fields.send(ctx);
            }
        }
    }

    fn outcome(&self) -> Outcome {
        match (self.request.action, self.request.quantity, self.fields[0]) {
            (Action::Refund, _, _) => Outcome::Refund,
            (Action::Take, 0, _) => Outcome::Peek,
            (Action::Take, _, 0) => Outcome::Allowed,
            (Action::Take, _, _) => Outcome::Limited,
        }
    }
}

/// `+OK`.
impl Reply for () {
    unsafe fn send(self, ctx: *mut raw::RedisModuleCtx) {
        unsafe { raw::RedisModule_ReplyWithSimpleString.unwrap()(ctx, c"OK".as_ptr()) };
    }
}

/// Defines `$callback`, the C function Redis calls for the command `$spec`: it runs `$body`
/// through [`run`]; given a `$mode` too, it runs `$body(call, $mode)`, so that a writing
/// command and its read-only variant share one body.
macro_rules! command_callback {
    ($callback:ident, $spec:path, $body:path, $mode:expr) => {
        $crate::redis::handler::command_callback!($callback, $spec, |call| $body(call, $mode));
    };
    ($callback:ident, $spec:path, $body:expr) => {
        unsafe extern "C" fn $callback(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            // SAFETY: Redis calls it as a command callback.
            unsafe { $crate::redis::handler::run(ctx, argv, argc, &$spec, $body) }
        }
    };
}
pub(crate) use command_callback;

/// Runs `body` for a call of `spec` with `argc` arguments, and counts the call in the
/// command's counters.
///
/// # Safety
/// `ctx`, `argv` and `argc` must come from Redis' command callback.
pub unsafe fn run<R: Reply>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    spec: &'static CommandSpec,
    body: impl FnOnce(&Invocation) -> Result<R, CommandError>,
) -> c_int {
    if let Keys::Counted(flags) = spec.keys {
        // SAFETY: the running command's context.
        if unsafe { raw::RedisModule_IsKeysPositionRequest.unwrap()(ctx) } != 0 {
            let _ = panic::catch_unwind(|| unsafe { report_counted_keys(ctx, argv, argc, flags) });
            return raw::Status::Ok as c_int;
        }
    }
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        let count = usize::try_from(argc).unwrap_or(0);
        if argv.is_null() || count < spec.min_arguments() || count > MAX_ARGUMENTS {
            return Err(CommandError::WrongArity);
        }
        // SAFETY: Redis passes `argc` valid strings in `argv`.
        let argv = unsafe { std::slice::from_raw_parts(argv, count) };
        // Only the arguments given are filled: no zeroing of the whole array per call. The
        // command's name, and a single key, are never read as bytes: they stay empty.
        let mut bytes = [MaybeUninit::<&[u8]>::uninit(); MAX_ARGUMENTS];
        let first_read = match spec.keys {
            Keys::One(_) => 2,
            Keys::Counted(_) => 1,
        }
        .min(count);
        for slot in &mut bytes[..first_read] {
            slot.write(&[]);
        }
        for (slot, &arg) in bytes[first_read..count].iter_mut().zip(&argv[first_read..]) {
            slot.write(unsafe { string_bytes(arg) });
        }
        // SAFETY: the first `count` elements were just written.
        let args = unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<&[u8]>(), count) };
        body(&Invocation {
            ctx,
            spec,
            argv,
            args,
            flags: Cell::new(None),
        })
    }));
    let result = result.unwrap_or(Err(CommandError::INTERNAL));
    if let Some(stats) = spec.stats {
        stats.record(result.as_ref().map_or(Outcome::Error, Reply::outcome));
    }
    unsafe {
        match result {
            Ok(reply) => reply.send(ctx),
            Err(error) => reply_error(ctx, error),
        }
    }
    raw::Status::Ok as c_int
}

/// Tells Redis where the keys of a `numkeys key [key ...]` call are (for Cluster routing,
/// `CROSSSLOT`, ACL and `COMMAND GETKEYS`): none when `numkeys` is not a count of keys the
/// call has, in which case the command itself replies with the error.
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
    // SAFETY: Redis passes `argc` valid strings in `argv`.
    let argv = unsafe { std::slice::from_raw_parts(argv, count) };
    let numkeys = crate::args::parse_integer(unsafe { string_bytes(argv[1]) });
    let Some(keys) = numkeys
        .and_then(|keys| usize::try_from(keys).ok())
        .filter(|keys| (1..=MAX_LIMITERS).contains(keys) && 2 + keys <= count)
    else {
        return;
    };
    for position in 2..2 + keys {
        unsafe {
            match raw::RedisModule_KeyAtPosWithFlags {
                Some(key_at) => key_at(ctx, position as c_int, flags as c_int),
                None => raw::RedisModule_KeyAtPos.unwrap()(ctx, position as c_int),
            }
        }
    }
}

/// The bytes of a Redis string, borrowed.
///
/// # Safety
/// `string` must be a live Redis string; the slice must not outlive it.
pub unsafe fn string_bytes<'a>(string: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0;
    let ptr = unsafe { raw::RedisModule_StringPtrLen.unwrap()(string, &mut len) };
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
    }
}

unsafe fn reply_error(ctx: *mut raw::RedisModuleCtx, error: CommandError) {
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

/// Sends panic messages to the Redis log (as data, never as a format string) instead of
/// the server's stderr, which may go nowhere.
pub fn log_panics_to_redis() {
    panic::set_hook(Box::new(|info| {
        let message = CString::new(format!("ratelimit module panic: {info}").replace('\0', " "))
            .unwrap_or_default();
        if let Some(log) = unsafe { raw::RedisModule_Log } {
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
