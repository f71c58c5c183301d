//! The internal commands by which a write's effect reaches a replica, an AOF replay or a slot
//! migration's target: each reads its arguments with `Effect::decode` and applies them with
//! `engine::apply`, the path the master's own commit takes (see `core::effect`).
//!
//! - `RL.LOG.APPLY key fields`: a log's change.
//! - `RL.LEASE.APPLY key fields [fields ...]`: a lease set's change.
//! - `RL.LOG.LOADCHUNK key entries [BLOCKED until_us]` and
//!   `RL.LEASE.LOADCHUNK key next_id leases`: what an AOF rewrite emits to rebuild a value.
//! - `RL.LOG.REPLAY key fields [fields ...]`: what releases before 0.3 sent for a log, the call again
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
use crate::redis::registration::{Arg, ArgKind, Mode};
use crate::redis::store::{self, RedisStore};

/// The reply to an internal command from an ordinary client.
const INTERNAL_ONLY: CommandError =
    CommandError::Message(c"ERR internal command: only a master or the AOF sends it");

/// Refuses the internal commands from ordinary clients: they are accepted only from a
/// master's replication stream (or a slot migration's) or while loading, and, for the
/// tests' forged effects, from any client of a server loaded with `debug-commands`.
fn internal_only(call: &Invocation) -> Result<(), CommandError> {
    if call.context_flags().is_from_master_or_aof() || crate::redis::startup::debug_commands() {
        Ok(())
    } else {
        Err(INTERNAL_ONLY)
    }
}

/// The keyspace event of a log's writes.
pub(super) const LOG_EVENT: &CStr = c"rl.log";
/// The keyspace event of a lease set's writes.
pub(super) const LEASE_EVENT: &CStr = c"rl.acquire";

/// The key, then the fields packed in one argument.
pub(super) const PACKED_ARGS: &[Arg] = &[
    Arg::new(c"key", ArgKind::Key),
    Arg::new(c"fields", ArgKind::String),
];

/// The key, then the fields: packed in one argument since 0.2.
pub(super) const FIELDS_ARGS: &[Arg] = &[
    Arg::new(c"key", ArgKind::Key),
    Arg::new(c"fields", ArgKind::String).multiple(),
];

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

pub(super) fn log_apply(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    apply(call, LOG_APPLY).map(|_| Reply::Ok)
}

pub(super) fn lease_apply(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    apply(call, LEASE_APPLY).map(|_| Reply::Ok)
}

/// A chunk that is not whole and in order changes nothing, and says so.
fn loaded(applied: Applied, invalid: &'static CStr) -> Result<Reply, CommandError> {
    match applied {
        Applied::Chunk(false) => Err(CommandError::Message(invalid)),
        _ => Ok(Reply::Ok),
    }
}

pub(super) fn log_load_chunk(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let invalid = c"ERR RL.LOG.LOADCHUNK: not a whole number of ordered entries";
    loaded(apply(call, LOG_LOAD_CHUNK)?, invalid)
}

pub(super) fn lease_load_chunk(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let invalid = c"ERR RL.LEASE.LOADCHUNK: not a whole number of ordered leases";
    loaded(apply(call, LEASE_LOAD_CHUNK)?, invalid)
}

/// `RL.LOG.REPLAY`: the call decided again, with the master's time.
pub(super) fn log_replay(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    internal_only(call)?;
    let replay = LegacyLogReplay::decode(&call.args[2..])
        .map_err(|error| CommandError::Message(error.message()))?;
    let engine_call = Call {
        limiters: &[Limiter::Log(replay.limiter)],
        request: replay.request,
        now: replay.now,
        write: true,
        seed: 0, // A log's call: no lease.
    };
    let mut verdict = [Verdict::default()];
    store::replay(call, &engine_call, &mut verdict)?;
    Ok(Reply::Integers(Integers::of(
        &verdict[0].to_reply(Unit::Microseconds, Rounding::Up),
    )))
}
