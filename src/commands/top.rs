//! `RL.TOP [count]` and `RL.TOP RESET`: the keys this server refused most over the current
//! and the previous minute, as `[key, refusals, error]`, most refused first (`count`, 10 by
//! default); `error` bounds the overcount of `refusals` (see [`crate::core::top`]).
//! Observational, like `SLOWLOG`: per server, neither replicated nor persisted.
//!
//! The limiter commands count a key here when they refuse it (not for a dry run or a
//! peek): [`record_refusals`].

use crate::args::parse_integer;
use crate::core::time::Micros;
use crate::error::CommandError;
use crate::redis::call::{Invocation, Reply};
use crate::redis::clock;
use crate::redis::handler::{callback, Registered};
use crate::redis::metadata::{Arg, ArgKind, CommandSpec, Keys, Mode};
use crate::redis::top;

/// `RL.TOP`'s answer while nothing is counted (`top-keys 0`, the default): an empty list
/// would say that nobody is refused.
const TURNED_OFF: &std::ffi::CStr = c"ERR RL.TOP is off on this server: turn it on with CONFIG SET ratelimit.top-keys 128 (or the module argument top-keys 128)";

/// Keys listed when no count is given.
const DEFAULT_COUNT: i64 = 10;

/// `RL.TOP`.
pub struct TopCommand;

impl Registered for TopCommand {
    const SPEC: &'static CommandSpec = &SPEC;
}

/// `RL.TOP`'s registration.
pub static SPEC: CommandSpec = CommandSpec {
    name: c"rl.top",
    handler: callback::<TopCommand>,
    body: run,
    mode: Mode::ReadOnly,
    flags: c"readonly",
    arity: -1,
    summary: c"The keys this server refused most over the current and the previous minute",
    complexity: c"O(N log N) where N is the number of keys kept (the module argument top-keys)",
    since: c"0.3.0",
    acl_categories: c"read slow",
    in_module_category: true,
    keys: Keys::None,
    args: &[Arg::one_of(
        c"what",
        &[Arg::new(c"count", ArgKind::Integer), Arg::token(c"RESET")],
    )
    .optional()],
    event: c"rl.top",
    stats: None,
};

fn run(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let count = match call.args.get(1..).unwrap_or_default() {
        [] => DEFAULT_COUNT,
        [word] if word.eq_ignore_ascii_case(b"RESET") => {
            top::reset();
            return Ok(Reply::Ok);
        }
        [word] => parse_integer(word)
            .filter(|count| *count >= 0)
            .ok_or(CommandError::Message(
                c"ERR count must be a non-negative integer. Usage: RL.TOP [count | RESET]",
            ))?,
        _ => return Err(CommandError::WrongArity),
    };
    if top::capacity() == 0 {
        return Err(CommandError::Message(TURNED_OFF));
    }
    Ok(Reply::Top(top::top(count as usize, clock::now())))
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
