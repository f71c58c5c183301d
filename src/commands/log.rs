//! `RL.LOG key limit window [quantity] [S | MS | US]`: the exact sliding log, in the module's
//! native type; and the two internal commands that carry it to replicas and the AOF:
//!
//! - `RL.LOG.REPLAY key limit window_us quantity now_us`: what the master propagates for a
//!   call that changed a log. The call is run again with the master's clock reading, so a
//!   replica or an AOF replay reaches the same log and the same absolute expiry, and what
//!   is propagated is a few integers, whatever the log's length.
//! - `RL.LOG.LOADCHUNK key entries`: what an AOF rewrite emits to rebuild a log.
//!
//! Both are accepted only from a master's replication stream or while loading the AOF.

use std::ffi::{c_longlong, CStr};

use redis_module::raw;

use crate::args::{integer_argument, parse_options};
use crate::core::log::{LogLimiter, SlidingLog};
use crate::core::time::{Rounding, Unit};
use crate::core::verdict::Verdict;
use crate::error::CommandError;
use crate::redis::clock;
use crate::redis::handler::{self, Invocation, LimiterReply};
use crate::redis::key::{Access, LimiterKey};
use crate::redis::log_type::log_type;
use crate::redis::metadata::{Arg, ArgKind, CommandSpec};
use crate::redis::stats::CommandStats;

use super::{
    limiter_reply, window_error, LIMITER_ACL_CATEGORIES, LIMITER_FLAGS, LIMITER_KEY_FLAGS, UNIT_ARG,
};

/// The command's name.
const NAME: &CStr = c"rl.log";

/// Its counters, for `INFO`.
pub static STATS: CommandStats = CommandStats::new(NAME);

/// `RL.LOG`'s registration.
pub static SPEC: CommandSpec = CommandSpec {
    name: NAME,
    handler: rl_log,
    flags: LIMITER_FLAGS,
    arity: -4,
    summary: c"Rate-limits a key with an exact sliding log of the requests it admitted",
    complexity: c"O(1) amortised",
    since: c"0.1.0",
    acl_categories: LIMITER_ACL_CATEGORIES,
    in_module_category: true,
    key_flags: LIMITER_KEY_FLAGS,
    args: &[
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"limit", ArgKind::Integer),
        Arg::new(c"window", ArgKind::Integer),
        Arg::new(c"quantity", ArgKind::Integer).optional(),
        UNIT_ARG,
    ],
    event: NAME,
    stats: Some(&STATS),
};

/// `RL.LOG.REPLAY`'s registration.
pub static REPLAY_SPEC: CommandSpec = CommandSpec {
    name: c"rl.log.replay",
    handler: rl_log_replay,
    flags: c"write fast",
    arity: 6,
    summary: c"Internal: applies an RL.LOG call with the master's time (replication and AOF only)",
    complexity: c"O(1) amortised",
    since: c"0.1.0",
    acl_categories: c"write fast",
    in_module_category: false,
    key_flags: LIMITER_KEY_FLAGS,
    args: &[
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"limit", ArgKind::Integer),
        Arg::new(c"window_us", ArgKind::Integer),
        Arg::new(c"quantity", ArgKind::Integer),
        Arg::new(c"now_us", ArgKind::Integer),
    ],
    event: NAME,
    stats: None,
};

/// `RL.LOG.LOADCHUNK`'s registration.
pub static LOAD_CHUNK_SPEC: CommandSpec = CommandSpec {
    name: c"rl.log.loadchunk",
    handler: rl_log_load_chunk,
    flags: c"write",
    arity: 3,
    summary: c"Internal: appends serialized entries to a log (AOF rewrite only)",
    complexity: c"O(N) for N entries",
    since: c"0.1.0",
    acl_categories: c"write slow",
    in_module_category: false,
    key_flags: raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_INSERT,
    args: &[
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"entries", ArgKind::String),
    ],
    event: NAME,
    stats: None,
};

const USAGE: CommandError =
    CommandError::Message(c"ERR syntax error. Usage: RL.LOG key limit window [quantity] [S|MS|US]");

const INTERNAL_ONLY: CommandError = CommandError::Message(
    c"ERR RL.LOG.REPLAY and RL.LOG.LOADCHUNK are internal: only a master or the AOF sends them",
);

handler::command_callback!(rl_log, SPEC, log);

handler::command_callback!(rl_log_replay, REPLAY_SPEC, replay);

handler::command_callback!(rl_log_load_chunk, LOAD_CHUNK_SPEC, load_chunk);

fn log(call: &Invocation) -> Result<LimiterReply, CommandError> {
    let [limit, window, tail @ ..] = &call.args[2..] else {
        return Err(CommandError::WrongArity);
    };
    let limit = integer_argument(limit, c"ERR limit is not an integer or out of range")?;
    let window = integer_argument(window, c"ERR window is not an integer or out of range")?;
    let options = parse_options(tail, USAGE, |_, _| Ok(false))?;
    let limiter = LogLimiter::new(limit, window, options.unit).map_err(window_error)?;
    let now = clock::now_micros();
    let verdict = decide(call, &limiter, options.quantity, now, Propagation::AsReplay)?;
    Ok(limiter_reply(verdict, &options, Rounding::Up))
}

fn replay(call: &Invocation) -> Result<[i64; 5], CommandError> {
    internal_only(call)?;
    let [limit, window, quantity, now] = &call.args[2..] else {
        return Err(CommandError::WrongArity);
    };
    let integer = |arg| integer_argument(arg, c"ERR RL.LOG.REPLAY takes integers");
    let limiter = LogLimiter::new(integer(limit)?, integer(window)?, Unit::Microseconds)
        .map_err(window_error)?;
    let quantity = u64::try_from(integer(quantity)?).map_err(|_| USAGE)?;
    let verdict = decide(
        call,
        &limiter,
        quantity,
        integer(now)?,
        Propagation::Verbatim,
    )?;
    Ok(verdict.to_reply(Unit::Microseconds, Rounding::Up))
}

/// How a call that changed a log reaches replicas and the AOF.
enum Propagation {
    /// As `RL.LOG.REPLAY` with the master's time: for `RL.LOG` itself.
    AsReplay,
    /// As it came: for the internal commands, already deterministic.
    Verbatim,
}

/// Decides a request of `quantity` at `now` on the call's key, logs it if admitted, and
/// propagates any change.
fn decide(
    call: &Invocation,
    limiter: &LogLimiter,
    quantity: u64,
    now: i64,
    propagation: Propagation,
) -> Result<Verdict, CommandError> {
    let access = Access::for_request(quantity, limiter.limit());
    let mut key = LimiterKey::open(call, call.key_name(), access)?;
    let stored = key.module_value::<SlidingLog>(log_type())?;
    // SAFETY: Redis owns the value and keeps it while the key is open; nothing else runs.
    let stored = stored.map(|log| unsafe { &mut *log });
    if access == Access::Read {
        return Ok(limiter.inspect(stored.as_deref(), now, quantity));
    }
    let (verdict, expire_at_ms) = match stored {
        Some(log) => {
            let (verdict, changed) = limiter.apply(log, now, quantity);
            (verdict, changed.then(|| limiter.expire_at_ms(log)))
        }
        None => {
            let mut log = Box::<SlidingLog>::default();
            let (verdict, changed) = limiter.apply(&mut log, now, quantity);
            let expire_at_ms = limiter.expire_at_ms(&log);
            if changed {
                key.set_module_value(log_type(), log)?;
            }
            (verdict, changed.then_some(expire_at_ms))
        }
    };
    if expire_at_ms.is_some() {
        key.changed_in_place(expire_at_ms)?;
        key.propagate(|| propagate(call, limiter, quantity, now, propagation));
    }
    Ok(verdict)
}

fn propagate(
    call: &Invocation,
    limiter: &LogLimiter,
    quantity: u64,
    now: i64,
    propagation: Propagation,
) {
    // SAFETY: the running command's context and key; integers passed as `l`.
    unsafe {
        match propagation {
            Propagation::AsReplay => {
                raw::RedisModule_Replicate.unwrap()(
                    call.ctx,
                    c"RL.LOG.REPLAY".as_ptr(),
                    c"sllll".as_ptr(),
                    call.key_name(),
                    limiter.limit() as c_longlong,
                    limiter.window_micros() as c_longlong,
                    quantity as c_longlong,
                    now as c_longlong,
                );
            }
            Propagation::Verbatim => replicate_verbatim(call),
        }
    }
}

fn replicate_verbatim(call: &Invocation) {
    // SAFETY: the running command's context.
    unsafe { raw::RedisModule_ReplicateVerbatim.unwrap()(call.ctx) };
}

fn load_chunk(call: &Invocation) -> Result<(), CommandError> {
    internal_only(call)?;
    let mut key = LimiterKey::open(call, call.key_name(), Access::Write)?;
    let invalid =
        CommandError::Message(c"ERR RL.LOG.LOADCHUNK: not a whole number of ordered entries");
    let entries = call.args[2];
    match key.module_value::<SlidingLog>(log_type())? {
        // SAFETY: as in `decide`.
        Some(log) => unsafe { &mut *log }
            .append_serialized(entries)
            .ok_or(invalid)?,
        None => {
            let mut log = Box::<SlidingLog>::default();
            log.append_serialized(entries).ok_or(invalid)?;
            key.set_module_value(log_type(), log)?;
        }
    }
    key.changed_in_place(None)?;
    replicate_verbatim(call);
    Ok(())
}

/// Refuses the internal commands from ordinary clients.
fn internal_only(call: &Invocation) -> Result<(), CommandError> {
    let allowed = raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING;
    // SAFETY: the running command's context.
    let flags = unsafe { raw::RedisModule_GetContextFlags.unwrap()(call.ctx) } as u32;
    if flags & allowed == 0 {
        return Err(INTERNAL_ONLY);
    }
    Ok(())
}
