//! Concurrency limits with leases, one native key per limiter:
//!
//! - `RL.ACQUIRE key limit lease [quantity] [S | MS | US]` takes `quantity` slots for a
//!   lease of `lease`; replies the five integers and the lease's id (0 when refused or
//!   peeked). `RL.ACQUIRE_RO` replies the same without writing.
//! - `RL.RELEASE key id` frees a lease at once: 1 if it was held, else 0.
//! - `RL.RENEW key id lease [S | MS | US]` extends a held lease to `lease` from now: 1, or 0
//!   if it is no longer held.
//!
//! And the internal commands that carry lease sets to replicas and the AOF:
//!
//! - `RL.LEASE.APPLY key ACQUIRE,now_us,limit,lease_us,quantity,id`,
//!   `RL.LEASE.APPLY key RELEASE,now_us,id`, `RL.LEASE.APPLY key RENEW,now_us,id,lease_us`
//!   (the fields packed in one argument, see [`crate::core::packed`]): what the master propagates
//!   for a call that changed a set, with its time and the id it chose, so a replica or an
//!   AOF replay reaches the same set, ids and expiry.
//! - `RL.LEASE.LOADCHUNK key next_id leases`: what an AOF rewrite emits to rebuild a set.

use std::ffi::CStr;

use crate::args::{integer_argument, is_keyword, parse_options, unit_keyword};
use crate::core::engine::{After, Key, NativeChange, Settled, Store};
use crate::core::lease::{self, Acquired, LeaseLimiter, LeaseSet};
use crate::core::packed::{self, Packed};
use crate::core::params::{self, MAX_LEASE_LIMIT};
use crate::core::request::{Request, Shortfall};
use crate::core::time::{Micros, Rounding, Unit};
use crate::error::CommandError;
use crate::redis::call::{Invocation, LimiterReply, Reply};
use crate::redis::clock;
use crate::redis::handler::{callback, Registered};
use crate::redis::metadata::{Arg, ArgKind, CommandSpec, Keys, Mode, KEY_INSERT, KEY_READ_WRITE};
use crate::redis::native_type::LEASE_LOAD_CHUNK_COMMAND;
use crate::redis::stats::CommandStats;
use crate::redis::store::RedisStore;

use super::{internal_only, limiter_spec, outcome, QUANTITY_ARG, UNIT_ARG};

const ACQUIRE: &CStr = c"rl.acquire";
const ACQUIRE_RO: &CStr = c"rl.acquire_ro";
const RELEASE: &CStr = c"rl.release";
const RENEW: &CStr = c"rl.renew";

/// `RL.ACQUIRE`'s counters, for `INFO`.
pub static ACQUIRE_STATS: CommandStats = CommandStats::new(ACQUIRE);
/// `RL.ACQUIRE_RO`'s counters.
pub static ACQUIRE_RO_STATS: CommandStats = CommandStats::new(ACQUIRE_RO);
/// `RL.RELEASE`'s counters: `allowed` counts replies of 1, `limited` replies of 0.
pub static RELEASE_STATS: CommandStats = CommandStats::new(RELEASE);
/// `RL.RENEW`'s counters, as `RL.RELEASE`'s.
pub static RENEW_STATS: CommandStats = CommandStats::new(RENEW);

const ACQUIRE_ARGS: &[Arg] = &[
    Arg::new(c"key", ArgKind::Key),
    Arg::new(c"limit", ArgKind::Integer),
    Arg::new(c"lease", ArgKind::Integer),
    QUANTITY_ARG,
    UNIT_ARG,
];

const ACQUIRE_COMPLEXITY: &CStr =
    c"O(1) amortised when leases share a duration, O(N) for N leases held otherwise";

/// `RL.ACQUIRE`.
pub struct Acquire;

impl Registered for Acquire {
    const SPEC: &'static CommandSpec = &ACQUIRE_SPEC;
}

/// `RL.ACQUIRE_RO`.
pub struct AcquireRo;

impl Registered for AcquireRo {
    const SPEC: &'static CommandSpec = &ACQUIRE_RO_SPEC;
}

/// `RL.RELEASE`.
pub struct Release;

impl Registered for Release {
    const SPEC: &'static CommandSpec = &RELEASE_SPEC;
}

/// `RL.RENEW`.
pub struct Renew;

impl Registered for Renew {
    const SPEC: &'static CommandSpec = &RENEW_SPEC;
}

/// `RL.LEASE.APPLY`.
pub struct Apply;

impl Registered for Apply {
    const SPEC: &'static CommandSpec = &APPLY_SPEC;
}

/// `RL.LEASE.LOADCHUNK`.
pub struct LoadChunk;

impl Registered for LoadChunk {
    const SPEC: &'static CommandSpec = &LOAD_CHUNK_SPEC;
}

/// `RL.ACQUIRE`'s registration.
pub static ACQUIRE_SPEC: CommandSpec = limiter_spec(
    ACQUIRE,
    callback::<Acquire>,
    run_acquire,
    Mode::Write,
    -4,
    c"Takes slots of a concurrency limit for a lease that ends on its own",
    ACQUIRE_COMPLEXITY,
    c"0.2.0",
    false,
    ACQUIRE_ARGS,
    &ACQUIRE_STATS,
);

/// `RL.ACQUIRE_RO`'s registration.
pub static ACQUIRE_RO_SPEC: CommandSpec = limiter_spec(
    ACQUIRE_RO,
    callback::<AcquireRo>,
    run_acquire,
    Mode::ReadOnly,
    -4,
    c"The reply RL.ACQUIRE would give, without writing anything",
    ACQUIRE_COMPLEXITY,
    c"0.2.0",
    false,
    ACQUIRE_ARGS,
    &ACQUIRE_RO_STATS,
);

/// `RL.RELEASE`'s registration.
pub static RELEASE_SPEC: CommandSpec = limiter_spec(
    RELEASE,
    callback::<Release>,
    release,
    Mode::Write,
    3,
    c"Frees a lease taken by RL.ACQUIRE at once",
    c"O(N) for N leases held",
    c"0.2.0",
    false,
    &[
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"id", ArgKind::Integer),
    ],
    &RELEASE_STATS,
);

/// `RL.RENEW`'s registration.
pub static RENEW_SPEC: CommandSpec = limiter_spec(
    RENEW,
    callback::<Renew>,
    renew,
    Mode::Write,
    -4,
    c"Extends a lease taken by RL.ACQUIRE to a new duration from now",
    c"O(N) for N leases held",
    c"0.2.0",
    false,
    &[
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"id", ArgKind::Integer),
        Arg::new(c"lease", ArgKind::Integer),
        UNIT_ARG,
    ],
    &RENEW_STATS,
);

/// `RL.LEASE.APPLY`'s registration.
pub static APPLY_SPEC: CommandSpec = CommandSpec {
    name: c"rl.lease.apply",
    handler: callback::<Apply>,
    body: apply,
    mode: Mode::Write,
    flags: c"write fast",
    arity: -3,
    summary:
        c"Internal: applies a lease change with the master's time and id (replication and AOF only)",
    complexity: ACQUIRE_COMPLEXITY,
    since: c"0.2.0",
    acl_categories: c"write fast",
    in_module_category: false,
    keys: Keys::One(KEY_READ_WRITE),
    args: &[
        Arg::new(c"key", ArgKind::Key),
        // `ACQUIRE|RELEASE|RENEW,now_us,...`, packed in one argument.
        Arg::new(c"fields", ArgKind::String).multiple(),
    ],
    event: ACQUIRE,
    stats: None,
};

/// `RL.LEASE.LOADCHUNK`'s registration.
pub static LOAD_CHUNK_SPEC: CommandSpec = CommandSpec {
    name: c"rl.lease.loadchunk",
    handler: callback::<LoadChunk>,
    body: load_chunk,
    mode: Mode::Write,
    flags: c"write",
    arity: 4,
    summary: c"Internal: appends serialized leases to a lease set (AOF rewrite only)",
    complexity: c"O(N) for N leases",
    since: c"0.2.0",
    acl_categories: c"write slow",
    in_module_category: false,
    keys: Keys::One(KEY_INSERT),
    args: &[
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"next_id", ArgKind::Integer),
        Arg::new(c"leases", ArgKind::String),
    ],
    event: ACQUIRE,
    stats: None,
};

const ACQUIRE_USAGE: CommandError = CommandError::Message(
    c"ERR syntax error. Usage: RL.ACQUIRE key limit lease [quantity] [S|MS|US]",
);

const RENEW_USAGE: CommandError =
    CommandError::Message(c"ERR syntax error. Usage: RL.RENEW key id lease [S|MS|US]");

const APPLY_INVALID: CommandError =
    CommandError::Message(c"ERR RL.LEASE.APPLY: not a change this module propagates");

const _: () = assert!(
    MAX_LEASE_LIMIT == 65_536,
    "the limit's error names the maximum"
);

/// A lease id argument: a positive integer.
fn lease_id(arg: &[u8]) -> Result<u64, CommandError> {
    let id = integer_argument(arg, c"ERR id is not an integer or out of range")?;
    u64::try_from(id)
        .ok()
        .filter(|&id| id > 0)
        .ok_or(CommandError::Message(c"ERR id must be positive"))
}

fn run_acquire(call: &Invocation, mode: Mode) -> Result<Reply, CommandError> {
    let [limit, lease, tail @ ..] = &call.args[2..] else {
        return Err(CommandError::WrongArity);
    };
    let limit = integer_argument(limit, c"ERR limit is not an integer or out of range")?;
    let lease = integer_argument(lease, c"ERR lease is not an integer or out of range")?;
    let options = parse_options(tail, ACQUIRE_USAGE, |_, _| Ok(false))?;
    if options.refund || options.block.is_some() {
        return Err(ACQUIRE_USAGE);
    }
    if options.shortfall != Shortfall::Refuse {
        return Err(CommandError::Message(
            c"ERR RL.ACQUIRE takes no DELAY, AT_MOST or FORCE: a lease is held whole until released, so wait for RL.RELEASE and retry",
        ));
    }
    let limiter = LeaseLimiter::new(limit, lease, options.unit)?;
    let quantity = options.quantity;
    let now = clock::now();
    let store = RedisStore::single(call, false);
    let acquired = if mode == Mode::Write && quantity > 0 && quantity <= limiter.limit() {
        let mut key = store.open(0, true)?;
        key.change_native(
            true,
            |set: &mut LeaseSet| {
                let acquired = limiter.acquire(set, now, quantity, None);
                NativeChange {
                    changed: acquired.id.is_some(),
                    after: After::expiring(lease::expire_at(set)),
                    reply: acquired,
                }
            },
            |acquired, packed| {
                let id = acquired.id.unwrap_or_default();
                lease::acquire_effect(&limiter, now, quantity, id, packed)
            },
        )?
        .ok_or(CommandError::INTERNAL)?
    } else {
        // Peeks, quantities that never fit and dry runs only read.
        let key = store.open(0, false)?;
        let set = key.native::<LeaseSet>()?;
        Acquired {
            verdict: limiter.inspect(set.as_deref(), now, quantity),
            id: None,
        }
    };
    let request = Request::take(quantity);
    Ok(Reply::Limiter(LimiterReply {
        fields: acquired.verdict.to_reply(options.unit, Rounding::Up),
        extra: Some(acquired.id.unwrap_or(0) as i64),
        details: None,
        outcome: outcome(&request, acquired.verdict.limited, &Settled::default()),
    }))
}

fn release(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let id = lease_id(call.args[2])?;
    let now = clock::now();
    let held = change_set(
        call,
        false,
        Propagation::Effect,
        |set| released(set, now, id),
        |_, packed| lease::release_effect(now, id, packed),
    )?;
    Ok(Reply::Held(held.unwrap_or(false)))
}

fn renew(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let [id, lease, tail @ ..] = &call.args[2..] else {
        return Err(CommandError::WrongArity);
    };
    let id = lease_id(id)?;
    let lease = integer_argument(lease, c"ERR lease is not an integer or out of range")?;
    let unit = match tail {
        [] => Unit::Seconds,
        [unit] => unit_keyword(unit).ok_or(RENEW_USAGE)?,
        _ => return Err(RENEW_USAGE),
    };
    let lease = params::lease(lease, unit)?;
    let now = clock::now();
    let renewed = change_set(
        call,
        false,
        Propagation::Effect,
        |set| renewed(set, now, id, lease),
        |_, packed| lease::renew_effect(now, id, lease, packed),
    )?;
    Ok(Reply::Held(renewed.unwrap_or(false)))
}

/// Releases lease `id` of `set`: whether it was held, and whether anything changed (the
/// lease freed, or others that ended dropped on the way).
fn released(set: &mut LeaseSet, now: Micros, id: u64) -> (bool, bool) {
    let before = set.len();
    let held = lease::release(set, now, id);
    (held, set.len() != before)
}

/// Renews lease `id` of `set` to `lease`: whether it was held, and whether anything changed.
fn renewed(set: &mut LeaseSet, now: Micros, id: u64, lease: Micros) -> (bool, bool) {
    let before = set.len();
    let held = lease::renew(set, now, id, lease);
    (held, held || set.len() != before)
}

/// How a change to a lease set reaches replicas and the AOF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Propagation {
    /// As its effect, with the call's time and id: a client's call.
    Effect,
    /// As the call came: `RL.LEASE.APPLY`, which carries a master's effect.
    Verbatim,
}

/// Runs `operation` on the call's lease set, when the key exists (or, with `create`, on a
/// new one): it returns its reply and whether it changed anything, which is then stored,
/// expired, signalled and propagated (`effect` writes it); a set left empty goes.
fn change_set<R>(
    call: &Invocation,
    create: bool,
    propagation: Propagation,
    operation: impl FnOnce(&mut LeaseSet) -> (R, bool),
    effect: impl FnOnce(&R, &mut Packed) -> &'static CStr,
) -> Result<Option<R>, CommandError> {
    let store = RedisStore::single(call, propagation == Propagation::Verbatim);
    let mut key = store.open(0, true)?;
    key.change_native(
        create,
        |set: &mut LeaseSet| {
            let (reply, changed) = operation(set);
            NativeChange {
                reply,
                changed,
                after: After::expiring(lease::expire_at(set)),
            }
        },
        effect,
    )
}

/// Applies a change a master propagated, with its time and id.
fn apply(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    internal_only(call)?;
    let mut unpacked = [&[][..]; 6];
    let fields = packed::unpack(&call.args[2..], &mut unpacked).ok_or(APPLY_INVALID)?;
    let [change, now, rest @ ..] = fields else {
        return Err(APPLY_INVALID);
    };
    let integer = |arg| integer_argument(arg, c"ERR RL.LEASE.APPLY takes integers");
    let now = Micros(integer(now)?);
    if is_keyword(change, "ACQUIRE") {
        let [limit, lease, quantity, id] = rest else {
            return Err(APPLY_INVALID);
        };
        let limiter = LeaseLimiter::new(integer(limit)?, integer(lease)?, Unit::Microseconds)?;
        let quantity = u64::try_from(integer(quantity)?)
            .ok()
            .filter(|quantity| (1..=limiter.limit()).contains(quantity))
            .ok_or(APPLY_INVALID)?;
        let id = lease_id(id)?;
        // What changes propagates as it came: the effect itself is never built.
        change_set(
            call,
            true,
            Propagation::Verbatim,
            |set| {
                (
                    (),
                    limiter.acquire(set, now, quantity, Some(id)).id.is_some(),
                )
            },
            |_, _| lease::LEASE_APPLY,
        )?;
    } else if is_keyword(change, "RELEASE") {
        let [id] = rest else {
            return Err(APPLY_INVALID);
        };
        let id = lease_id(id)?;
        change_set(
            call,
            false,
            Propagation::Verbatim,
            |set| ((), released(set, now, id).1),
            |_, _| lease::LEASE_APPLY,
        )?;
    } else if is_keyword(change, "RENEW") {
        let [id, lease] = rest else {
            return Err(APPLY_INVALID);
        };
        let (id, lease) = (lease_id(id)?, Micros(integer(lease)?));
        change_set(
            call,
            false,
            Propagation::Verbatim,
            |set| ((), renewed(set, now, id, lease).1),
            |_, _| lease::LEASE_APPLY,
        )?;
    } else {
        return Err(APPLY_INVALID);
    }
    Ok(Reply::Ok)
}

/// `RL.LEASE.LOADCHUNK key next_id leases`: leases appended to the key's set (a new one when
/// missing), as an AOF rewrite emitted them.
fn load_chunk(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    internal_only(call)?;
    let invalid =
        CommandError::Message(c"ERR RL.LEASE.LOADCHUNK: not a whole number of ordered leases");
    let next_id = u64::try_from(integer_argument(
        call.args[2],
        c"ERR RL.LEASE.LOADCHUNK takes integers",
    )?)
    .map_err(|_| invalid)?;
    let leases = call.args[3];
    let store = RedisStore::single(call, true);
    let mut key = store.open(0, true)?;
    let loaded = key.change_native(
        true,
        |set: &mut LeaseSet| {
            let loaded = set.append_serialized(next_id, leases);
            NativeChange {
                changed: loaded.is_some(),
                reply: loaded,
                after: After::KeepsItsExpiry,
            }
        },
        // The chunk travels as it came.
        |_, _| LEASE_LOAD_CHUNK_COMMAND,
    )?;
    loaded.flatten().ok_or(invalid)?;
    Ok(Reply::Ok)
}
