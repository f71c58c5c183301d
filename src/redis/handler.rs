//! The bridge from the server's command callback to a command's body: the arguments as byte
//! slices (no copies, no allocation), every panic caught before it can reach the server,
//! and the reply written only once the body has finished, so a reply is never left
//! half-built.
//!
//! The commands are one [`Table`] of [`Command`]s, given by the crate's root. The server
//! calls [`callback`] for entry `I` of it, one function per entry ([`callbacks`]): Redis
//! passes a command callback no data of its own, so the entry is known by which function it
//! called.

use std::ffi::{c_int, CString};
use std::mem::MaybeUninit;
use std::panic::{self, AssertUnwindSafe};

use redis_module::raw;

use crate::core::engine::MAX_LIMITERS;
use crate::error::CommandError;
use crate::redis::api::{self, CommandFunc, Ctx, ServerStr};
use crate::redis::call::{Invocation, Outcome, Reply};
use crate::redis::registration::{Command, Keys, MAX_COMMANDS};
use crate::redis::stats;

/// The most arguments any command accepts, counting its name; more is a wrong arity.
/// `RL.ALL` with 16 limiters of the longest form and every option takes about 110.
const MAX_ARGUMENTS: usize = 128;

/// Every command the module registers, in one table (the crate's root gives it).
pub trait Table: 'static {
    /// The commands, at most [`MAX_COMMANDS`].
    const COMMANDS: &'static [Command];
}

/// The C function the server calls for entry `I` of `T`'s commands.
///
/// # Safety
/// Only the server calls it, as a command callback, with its context and arguments.
pub unsafe extern "C" fn callback<T: Table, const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: the server's own arguments to a command callback, alive while it runs.
    let (ctx, argv) = unsafe {
        let count = usize::try_from(argc).unwrap_or(0);
        (Ctx::from_raw(ctx), ServerStr::slice(argv, count))
    };
    serve(ctx, argv, I, &T::COMMANDS[I]);
    raw::Status::Ok as c_int
}

/// One callback per possible entry of `T`'s table: entry `i` is registered with the `i`th.
pub fn callbacks<T: Table>() -> [CommandFunc; MAX_COMMANDS] {
    macro_rules! each {
        ($($index:literal)*) => {
            [$(callback::<T, $index> as CommandFunc),*]
        };
    }
    const _: () = assert!(MAX_COMMANDS == 32);
    each!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31)
}

/// Runs `command`'s body (entry `index` of the table) for a call with arguments `argv`,
/// counts the call in the command's counters, and replies.
fn serve(ctx: Ctx<'_>, argv: &[ServerStr<'_>], index: usize, command: &'static Command) {
    if let Keys::Counted(flags) = command.keys {
        if api::is_keys_position_request(ctx) {
            let _ = panic::catch_unwind(|| report_counted_keys(ctx, argv, flags));
            return;
        }
    }
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        let count = argv.len();
        if count < command.min_arguments() || count > MAX_ARGUMENTS {
            return Err(CommandError::WrongArity);
        }
        // Only the arguments given are filled: no zeroing of the whole array per call. The
        // command's name, and a single key, are never read as bytes: they stay empty.
        let mut bytes = [MaybeUninit::<&[u8]>::uninit(); MAX_ARGUMENTS];
        let first_read = match command.keys {
            Keys::One(_) => 2,
            Keys::None | Keys::Counted(_) => 1,
        }
        .min(count);
        for slot in &mut bytes[..first_read] {
            slot.write(&[]);
        }
        for (slot, arg) in bytes[first_read..count].iter_mut().zip(&argv[first_read..]) {
            slot.write(arg.bytes());
        }
        // SAFETY: the first `count` elements were just written.
        let args = unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<&[u8]>(), count) };
        let call = Invocation::new(ctx, command.event, argv, args);
        (command.body)(&call, command.mode)
    }));
    let result = result.unwrap_or(Err(CommandError::INTERNAL));
    if command.counted {
        stats::record(
            index,
            result.as_ref().map_or(Outcome::Error, Reply::outcome),
        );
    }
    match result {
        Ok(reply) => reply.send(ctx),
        Err(CommandError::WrongArity) => api::wrong_arity(ctx),
        Err(CommandError::Syntax) => api::reply_with_error(ctx, command.syntax_error(index)),
        Err(CommandError::Usage(what)) => {
            api::reply_with_error(ctx, command.usage_error(index, what))
        }
        Err(CommandError::Message(message)) => api::reply_with_error(ctx, message),
    }
}

/// Tells the server where the keys of a `numkeys key [key ...]` call are (for Cluster
/// routing, `CROSSSLOT`, ACL and `COMMAND GETKEYS`): none when `numkeys` is not a count of
/// keys the call has, in which case the command itself replies with the error.
fn report_counted_keys(ctx: Ctx<'_>, argv: &[ServerStr<'_>], flags: u32) {
    let Some(numkeys) = argv.get(1) else {
        return;
    };
    let keys = crate::core::packed::parse_integer(numkeys.bytes())
        .and_then(|keys| usize::try_from(keys).ok())
        .filter(|keys| (1..=MAX_LIMITERS).contains(keys) && 2 + keys <= argv.len());
    for position in (2..).take(keys.unwrap_or(0)) {
        api::key_at_pos(ctx, position as c_int, flags);
    }
}

/// Sends panic messages to the server's log (as data, never as a format string) instead of
/// its stderr, which may go nowhere.
pub fn log_panics_to_redis() {
    panic::set_hook(Box::new(|info| {
        let message = CString::new(format!("ratelimit module panic: {info}").replace('\0', " "))
            .unwrap_or_default();
        api::log(None, c"warning", &message);
    }));
}
