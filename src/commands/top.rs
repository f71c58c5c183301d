//! `RL.TOP [count]`: the keys this server refused most over the current and the previous
//! minute, as `[key, refusals, error]`, most refused first (`count`, 10 by default); `error`
//! bounds the overcount of `refusals` (see [`crate::core::top`]). Observational, like
//! `SLOWLOG`: per server, neither replicated nor persisted.
//!
//! `RL.TOP.RESET` forgets what was counted. It is an admin command, as `SLOWLOG RESET` is:
//! whoever may read `RL.TOP` (`+@read`) may not wipe it.
//!
//! The limiter commands count a key here when they refuse it (not for a dry run or a
//! peek): [`record_refusals`].

use crate::core::time::Micros;
use crate::error::CommandError;
use crate::options::parse_integer;
use crate::redis::call::{Invocation, Reply};
use crate::redis::clock;
use crate::redis::registration::Mode;
use crate::redis::top;

/// `RL.TOP`'s answer while nothing is counted (`top-keys 0`, the default): an empty list
/// would say that nobody is refused.
const TURNED_OFF: &std::ffi::CStr = c"ERR RL.TOP is off on this server: turn it on with CONFIG SET ratelimit.top-keys 128 (or the module argument top-keys 128)";

/// Keys listed when no count is given.
const DEFAULT_COUNT: i64 = 10;

pub(super) fn top(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let count = match call.args.get(1..).unwrap_or_default() {
        [] => DEFAULT_COUNT,
        [word] if word.eq_ignore_ascii_case(b"RESET") => {
            return Err(CommandError::Message(
                c"ERR RL.TOP RESET is RL.TOP.RESET, an admin command (as SLOWLOG RESET is)",
            ))
        }
        [word] => parse_integer(word)
            .filter(|count| *count >= 0)
            .ok_or(CommandError::Usage(c"count must be a non-negative integer"))?,
        _ => return Err(CommandError::WrongArity),
    };
    if top::capacity() == 0 {
        return Err(CommandError::Message(TURNED_OFF));
    }
    Ok(Reply::Top(top::top(count as usize, clock::now())))
}

/// `RL.TOP.RESET`: forgets every refusal counted, for a caller with admin rights: one who
/// may run `SLOWLOG RESET`. Redis 7.0 puts module commands in no ACL category, so `-@admin`
/// alone would not keep a user from this command there; the check holds on every server.
pub(super) fn reset(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    if !call.caller_may_run(&[b"SLOWLOG", b"RESET"]) {
        return Err(CommandError::Message(
            c"NOPERM RL.TOP.RESET needs admin rights: a user who may run SLOWLOG RESET",
        ));
    }
    top::reset();
    Ok(Reply::Ok)
}

/// Counts the keys of a refused call: argument `first` and the `count` after it, those
/// `refused` says (a single-key call passes its key alone).
pub fn record_refusals(
    call: &Invocation,
    first: usize,
    refused: impl Iterator<Item = bool>,
    now: Micros,
) {
    for (offset, refused) in refused.enumerate() {
        if refused {
            top::record_refusal(call.arg_bytes(first + offset), now);
        }
    }
}
