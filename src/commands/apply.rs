//! The internal commands by which a write's effect reaches a replica, an AOF replay or a slot
//! migration's target: each reads its arguments with `Effect::decode` and applies them with
//! `engine::apply`, the path the master's own commit takes (see `core::effect`).
//!
//! - `RL.LOG.APPLY key fields`: a log's change.
//! - `RL.LEASE.APPLY key fields`: a lease set's change.
//! - `RL.LOG.LOADCHUNK key entries [BLOCKED until_us]` and
//!   `RL.LEASE.LOADCHUNK key next_id leases`: what an AOF rewrite emits to rebuild a value.
//! - `RL.LOG.REPLAY key fields`: what releases before 0.3 sent for a log, the call again
//!   with the master's time, which the engine decides again.
//!
//! Each is accepted only from a master's replication stream (or a slot migration's) or
//! while loading, and what it changes travels on as it came.

use std::ffi::CStr;

use crate::core::effect::{
    Effect, LegacyLogReplay, LEASE_APPLY, LEASE_LOAD_CHUNK, LOG_APPLY, LOG_LOAD_CHUNK,
};
use crate::core::engine::{self, Applied, Call, Store};
use crate::core::limiter::Limiter;
use crate::core::time::{Rounding, Unit};
use crate::core::verdict::Verdict;
use crate::error::CommandError;
use crate::redis::call::{Integers, Invocation, Reply};
use crate::redis::handler::{callback, Registered};
use crate::redis::metadata::{
    Arg, ArgKind, Body, CommandSpec, Handler, Keys, Mode, KEY_INSERT, KEY_READ_WRITE,
};
use crate::redis::store::{self, RedisStore};

use super::internal_only;

/// The keyspace event of a log's writes.
const LOG_EVENT: &CStr = c"rl.log";
/// The keyspace event of a lease set's writes.
const LEASE_EVENT: &CStr = c"rl.acquire";

/// `RL.LOG.APPLY`.
pub struct LogApply;

impl Registered for LogApply {
    const SPEC: &'static CommandSpec = &LOG_APPLY_SPEC;
}

/// `RL.LEASE.APPLY`.
pub struct LeaseApply;

impl Registered for LeaseApply {
    const SPEC: &'static CommandSpec = &LEASE_APPLY_SPEC;
}

/// `RL.LOG.LOADCHUNK`.
pub struct LogLoadChunk;

impl Registered for LogLoadChunk {
    const SPEC: &'static CommandSpec = &LOG_LOAD_CHUNK_SPEC;
}

/// `RL.LEASE.LOADCHUNK`.
pub struct LeaseLoadChunk;

impl Registered for LeaseLoadChunk {
    const SPEC: &'static CommandSpec = &LEASE_LOAD_CHUNK_SPEC;
}

/// `RL.LOG.REPLAY`.
pub struct LogReplay;

impl Registered for LogReplay {
    const SPEC: &'static CommandSpec = &LOG_REPLAY_SPEC;
}

/// The registration of an internal command.
#[allow(clippy::too_many_arguments)] // One per field of the registration that differs.
const fn internal_spec(
    name: &'static CStr,
    handler: Handler,
    body: Body,
    arity: std::ffi::c_int,
    summary: &'static CStr,
    complexity: &'static CStr,
    since: &'static CStr,
    key_flags: u32,
    args: &'static [Arg],
    event: &'static CStr,
) -> CommandSpec {
    CommandSpec {
        name,
        handler,
        body,
        mode: Mode::Write,
        flags: c"write fast",
        arity,
        summary,
        complexity,
        since,
        acl_categories: c"write fast",
        in_module_category: false,
        keys: Keys::One(key_flags),
        args,
        event,
        stats: None,
    }
}

/// The key, then the fields packed in one argument.
const PACKED_ARGS: &[Arg] = &[
    Arg::new(c"key", ArgKind::Key),
    Arg::new(c"fields", ArgKind::String),
];

/// The key, then the fields: packed in one argument since 0.2.
const FIELDS_ARGS: &[Arg] = &[
    Arg::new(c"key", ArgKind::Key),
    Arg::new(c"fields", ArgKind::String).multiple(),
];

/// `RL.LOG.APPLY`'s registration.
pub static LOG_APPLY_SPEC: CommandSpec = internal_spec(
    c"rl.log.apply",
    callback::<LogApply>,
    log_apply,
    3,
    c"Internal: applies a log's change as the master decided it (replication and AOF only)",
    c"O(1) amortised",
    c"0.3.0",
    KEY_READ_WRITE,
    PACKED_ARGS,
    LOG_EVENT,
);

/// `RL.LEASE.APPLY`'s registration.
pub static LEASE_APPLY_SPEC: CommandSpec = internal_spec(
    c"rl.lease.apply",
    callback::<LeaseApply>,
    lease_apply,
    -3,
    c"Internal: applies a lease change with the master's time and id (replication and AOF only)",
    c"O(1) amortised when leases share a duration, O(N) for N leases held otherwise",
    c"0.2.0",
    KEY_READ_WRITE,
    FIELDS_ARGS,
    LEASE_EVENT,
);

/// `RL.LOG.LOADCHUNK`'s registration: not `fast`, a chunk holds up to 1,024 entries.
pub static LOG_LOAD_CHUNK_SPEC: CommandSpec = CommandSpec {
    flags: c"write",
    acl_categories: c"write slow",
    ..internal_spec(
        c"rl.log.loadchunk",
        callback::<LogLoadChunk>,
        log_load_chunk,
        -3,
        c"Internal: appends serialized entries to a log (AOF rewrite only)",
        c"O(N) for N entries",
        c"0.1.0",
        KEY_INSERT,
        &[
            Arg::new(c"key", ArgKind::Key),
            Arg::new(c"entries", ArgKind::String),
            Arg::new(c"until_us", ArgKind::Integer)
                .after_token(c"BLOCKED")
                .optional(),
        ],
        LOG_EVENT,
    )
};

/// `RL.LEASE.LOADCHUNK`'s registration.
pub static LEASE_LOAD_CHUNK_SPEC: CommandSpec = CommandSpec {
    flags: c"write",
    acl_categories: c"write slow",
    ..internal_spec(
        c"rl.lease.loadchunk",
        callback::<LeaseLoadChunk>,
        lease_load_chunk,
        4,
        c"Internal: appends serialized leases to a lease set (AOF rewrite only)",
        c"O(N) for N leases",
        c"0.2.0",
        KEY_INSERT,
        &[
            Arg::new(c"key", ArgKind::Key),
            Arg::new(c"next_id", ArgKind::Integer),
            Arg::new(c"leases", ArgKind::String),
        ],
        LEASE_EVENT,
    )
};

/// `RL.LOG.REPLAY`'s registration.
pub static LOG_REPLAY_SPEC: CommandSpec = internal_spec(
    c"rl.log.replay",
    callback::<LogReplay>,
    log_replay,
    -3,
    c"Internal: an RL.LOG call with the master's time, as releases before 0.3 propagated it (replication and AOF only)",
    c"O(1) amortised",
    c"0.1.0",
    KEY_READ_WRITE,
    // `limit,window_us,quantity,now_us[,option]` packed in one argument (0.2), or the same
    // fields as separate arguments (0.1).
    FIELDS_ARGS,
    LOG_EVENT,
);

/// Applies the effect `command` carries to the call's key; the reply says what it did.
fn apply(call: &Invocation, command: &CStr) -> Result<Applied, CommandError> {
    internal_only(call)?;
    let effect = Effect::decode(command.to_bytes(), &call.args[2..])
        .map_err(|error| CommandError::Message(error.message()))?;
    let store = RedisStore::single(call, true);
    let mut key = store.open(0, true)?;
    let applied = engine::apply(&mut key, &effect)?;
    // A release or renewal of a set that is gone changes nothing.
    Ok(applied.unwrap_or(Applied::Chunk(true)))
}

fn log_apply(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    apply(call, LOG_APPLY).map(|_| Reply::Ok)
}

fn lease_apply(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    apply(call, LEASE_APPLY).map(|_| Reply::Ok)
}

/// A chunk that is not whole and in order changes nothing, and says so.
fn loaded(applied: Applied, invalid: &'static CStr) -> Result<Reply, CommandError> {
    match applied {
        Applied::Chunk(false) => Err(CommandError::Message(invalid)),
        _ => Ok(Reply::Ok),
    }
}

fn log_load_chunk(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let invalid = c"ERR RL.LOG.LOADCHUNK: not a whole number of ordered entries";
    loaded(apply(call, LOG_LOAD_CHUNK)?, invalid)
}

fn lease_load_chunk(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let invalid = c"ERR RL.LEASE.LOADCHUNK: not a whole number of ordered leases";
    loaded(apply(call, LEASE_LOAD_CHUNK)?, invalid)
}

/// `RL.LOG.REPLAY`: the call decided again, with the master's time.
fn log_replay(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    internal_only(call)?;
    let replay = LegacyLogReplay::decode(&call.args[2..])
        .map_err(|error| CommandError::Message(error.message()))?;
    let engine_call = Call {
        limiters: &[Limiter::Log(replay.limiter)],
        request: replay.request,
        now: replay.now,
        write: true,
    };
    let mut verdict = [Verdict::default()];
    store::replay(call, &engine_call, &mut verdict)?;
    Ok(Reply::Integers(Integers::of(
        &verdict[0].to_reply(Unit::Microseconds, Rounding::Up),
    )))
}
