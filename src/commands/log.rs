//! `RL.LOG key limit window [quantity] [S | MS | US] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]`: the exact
//! sliding log, in the module's native type; `RL.LOG_RO`, the same decision without
//! writing; and the two internal commands that carry logs to replicas and the AOF:
//!
//! - `RL.LOG.REPLAY key limit window_us quantity now_us [REFUND] [BLOCK block_us] [DELAY max_wait_us | AT_MOST |
//!   FORCE]`: what
//!   the master propagates for a call that changed a log. The call is run again with the
//!   master's clock reading, so a replica or an AOF replay reaches the same log and the same
//!   absolute expiry, and what is propagated is a few integers, whatever the log's length.
//! - `RL.LOG.LOADCHUNK key entries [BLOCKED until_us]`: what an AOF rewrite emits to
//!   rebuild a log.
//!
//! Both are accepted only from a master's replication stream or while loading the AOF.

use std::ffi::{c_int, CStr};

use crate::args::{integer_argument, is_keyword, parse_options, CommonOptions};
use crate::core::engine::{After, Call, Key, NativeChange, Store};
use crate::core::limiter::Limiter;
use crate::core::log::{LogLimiter, SlidingLog};
use crate::core::packed;
use crate::core::request::{Request, Shortfall};
use crate::core::time::{Micros, Rounding, Unit};
use crate::core::verdict::Verdict;
use crate::error::CommandError;
use crate::redis::call::{Integers, Invocation, Reply};
use crate::redis::handler::{callback, Registered};
use crate::redis::metadata::{Arg, ArgKind, CommandSpec, Keys, Mode, KEY_INSERT, KEY_READ_WRITE};
use crate::redis::native_type::{BLOCKED_KEYWORD, LOAD_CHUNK_COMMAND};
use crate::redis::stats::CommandStats;
use crate::redis::store::{self, RedisStore};

use super::{
    internal_only, limiter_spec, single, without_refund, BLOCK_ARG, QUANTITY_ARG, REFUND_ARG,
    SHORTFALL_ARG, UNIT_ARG,
};

const NAME: &CStr = c"rl.log";
const NAME_RO: &CStr = c"rl.log_ro";

/// `RL.LOG`'s counters, for `INFO`.
pub static STATS: CommandStats = CommandStats::new(NAME);
/// `RL.LOG_RO`'s counters.
pub static STATS_RO: CommandStats = CommandStats::new(NAME_RO);

/// The command's name and its three required arguments.
const REQUIRED_ARGUMENTS: c_int = 4;

const ARGS: &[Arg] = &[
    Arg::new(c"key", ArgKind::Key),
    Arg::new(c"limit", ArgKind::Integer),
    Arg::new(c"window", ArgKind::Integer),
    QUANTITY_ARG,
    UNIT_ARG,
    BLOCK_ARG,
    SHORTFALL_ARG,
    REFUND_ARG,
];

/// `RL.LOG`.
pub struct Log;

impl Registered for Log {
    const SPEC: &'static CommandSpec = &SPEC;
}

/// `RL.LOG_RO`.
pub struct LogRo;

impl Registered for LogRo {
    const SPEC: &'static CommandSpec = &SPEC_RO;
}

/// `RL.LOG.REPLAY`.
pub struct Replay;

impl Registered for Replay {
    const SPEC: &'static CommandSpec = &REPLAY_SPEC;
}

/// `RL.LOG.LOADCHUNK`.
pub struct LoadChunk;

impl Registered for LoadChunk {
    const SPEC: &'static CommandSpec = &LOAD_CHUNK_SPEC;
}

/// `RL.LOG`'s registration.
pub static SPEC: CommandSpec = limiter_spec(
    NAME,
    callback::<Log>,
    run,
    Mode::Write,
    -REQUIRED_ARGUMENTS,
    c"Rate-limits a key with an exact sliding log of the requests it admitted",
    c"O(1) amortised",
    c"0.1.0",
    false,
    ARGS,
    &STATS,
);

/// `RL.LOG_RO`'s registration.
pub static SPEC_RO: CommandSpec = limiter_spec(
    NAME_RO,
    callback::<LogRo>,
    run,
    Mode::ReadOnly,
    -REQUIRED_ARGUMENTS,
    c"The reply RL.LOG would give, without writing anything",
    c"O(1) amortised",
    c"0.2.0",
    false,
    without_refund(ARGS),
    &STATS_RO,
);

/// `RL.LOG.REPLAY`'s registration.
pub static REPLAY_SPEC: CommandSpec = CommandSpec {
    name: c"rl.log.replay",
    handler: callback::<Replay>,
    body: replay,
    mode: Mode::Write,
    flags: c"write fast",
    arity: -3,
    summary: c"Internal: applies an RL.LOG call with the master's time (replication and AOF only)",
    complexity: c"O(1) amortised",
    since: c"0.1.0",
    acl_categories: c"write fast",
    in_module_category: false,
    keys: Keys::One(KEY_READ_WRITE),
    args: &[
        Arg::new(c"key", ArgKind::Key),
        // `limit,window_us,quantity,now_us[,REFUND|,BLOCK,us|,DELAY,us|,AT_MOST|,FORCE]`, packed in one argument since
        // 0.2; before, the same fields came as separate arguments.
        Arg::new(c"fields", ArgKind::String).multiple(),
    ],
    event: NAME,
    stats: None,
};

/// `RL.LOG.LOADCHUNK`'s registration.
pub static LOAD_CHUNK_SPEC: CommandSpec = CommandSpec {
    name: c"rl.log.loadchunk",
    handler: callback::<LoadChunk>,
    body: load_chunk,
    mode: Mode::Write,
    flags: c"write",
    arity: -3,
    summary: c"Internal: appends serialized entries to a log (AOF rewrite only)",
    complexity: c"O(N) for N entries",
    since: c"0.1.0",
    acl_categories: c"write slow",
    in_module_category: false,
    keys: Keys::One(KEY_INSERT),
    args: &[
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"entries", ArgKind::String),
        Arg::new(c"until_us", ArgKind::Integer)
            .after_token(c"BLOCKED")
            .optional(),
    ],
    event: NAME,
    stats: None,
};

const USAGE: CommandError = CommandError::Message(
    c"ERR syntax error. Usage: RL.LOG key limit window [quantity] [S|MS|US] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]",
);

fn run(call: &Invocation, mode: Mode) -> Result<Reply, CommandError> {
    let (params, options) = parse(&call.args[2..])?;
    let limiter = params.limiter(options.unit)?;
    single(call, limiter, &options, mode, Rounding::Up)
}

/// Parses the arguments after the command's name and key.
fn parse(args: &[&[u8]]) -> Result<(Params, CommonOptions), CommandError> {
    let [limit, window, tail @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    Ok((
        Params::parse(limit, window)?,
        parse_options(tail, USAGE, |_, _| Ok(false))?,
    ))
}

/// The log's parameters as given: `limit window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    limit: i64,
    window: i64,
}

impl Params {
    /// Parses `limit window`.
    pub fn parse(limit: &[u8], window: &[u8]) -> Result<Params, CommandError> {
        Ok(Params {
            limit: integer_argument(limit, c"ERR limit is not an integer or out of range")?,
            window: integer_argument(window, c"ERR window is not an integer or out of range")?,
        })
    }

    /// The limiter, with `window` in `unit`s.
    pub fn limiter(&self, unit: Unit) -> Result<Limiter, CommandError> {
        Ok(Limiter::Log(LogLimiter::new(
            self.limit,
            self.window,
            unit,
        )?))
    }
}

/// `RL.LOG.REPLAY key limit,window_us,quantity,now_us[,REFUND|,BLOCK,us|,DELAY,us|,AT_MOST|,FORCE]`, and the same
/// fields as separate arguments, as versions before 0.2 propagated them.
fn replay(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    internal_only(call)?;
    let mut unpacked = [&[][..]; 6];
    let fields = packed::unpack(&call.args[2..], &mut unpacked).ok_or(USAGE)?;
    let [limit, window, quantity, now, tail @ ..] = fields else {
        return Err(CommandError::WrongArity);
    };
    let integer = |arg| integer_argument(arg, c"ERR RL.LOG.REPLAY takes integers");
    let limiter = LogLimiter::new(integer(limit)?, integer(window)?, Unit::Microseconds)?;
    let quantity = u64::try_from(integer(quantity)?).map_err(|_| USAGE)?;
    let request = match tail {
        [] => Request::take(quantity),
        [refund] if is_keyword(refund, "REFUND") => Request::refund(quantity),
        [block, duration] if is_keyword(block, "BLOCK") => Request {
            block: Some(Micros(integer(duration)?.max(1))),
            ..Request::take(quantity)
        },
        [force] if is_keyword(force, "FORCE") => Request {
            shortfall: Shortfall::Owe,
            ..Request::take(quantity)
        },
        [at_most] if is_keyword(at_most, "AT_MOST") => Request {
            shortfall: Shortfall::TakePart,
            ..Request::take(quantity)
        },
        [delay, max_wait] if is_keyword(delay, "DELAY") => Request {
            shortfall: Shortfall::Delay(Micros(integer(max_wait)?.max(0))),
            ..Request::take(quantity)
        },
        _ => return Err(USAGE),
    };
    let engine_call = Call {
        limiters: &[Limiter::Log(limiter)],
        request,
        now: Micros(integer(now)?),
        write: true,
    };
    let mut verdict = [Verdict::default()];
    store::replay(call, &engine_call, &mut verdict)?;
    Ok(Reply::Integers(Integers::of(
        &verdict[0].to_reply(Unit::Microseconds, Rounding::Up),
    )))
}

/// `RL.LOG.LOADCHUNK key entries [BLOCKED until_us]`: entries appended to the key's log (a
/// new one when missing), as an AOF rewrite emitted them.
fn load_chunk(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    internal_only(call)?;
    let invalid =
        CommandError::Message(c"ERR RL.LOG.LOADCHUNK: not a whole number of ordered entries");
    let blocked_until = match &call.args[3..] {
        [] => None,
        [keyword, until] if is_keyword(keyword, BLOCKED_KEYWORD.to_str().unwrap_or_default()) => {
            Some(integer_argument(until, c"ERR RL.LOG.LOADCHUNK takes integers")?.max(0))
        }
        _ => return Err(invalid),
    };
    let entries = call.args[2];
    let store = RedisStore::single(call, true);
    let mut key = store.open(0, true)?;
    let loaded = key.change_native(
        true,
        |log: &mut SlidingLog| {
            let loaded = log.append_serialized(entries);
            if loaded.is_some() {
                if let Some(until) = blocked_until {
                    log.set_blocked_until(Micros(until));
                }
            }
            NativeChange {
                changed: loaded.is_some(),
                reply: loaded,
                // The key's expiry comes after, as the AOF's own PEXPIREAT.
                after: After::KeepsItsExpiry,
            }
        },
        // The chunk travels as it came.
        |_, _| LOAD_CHUNK_COMMAND,
    )?;
    loaded.flatten().ok_or(invalid)?;
    Ok(Reply::Ok)
}
