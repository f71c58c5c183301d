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
//!   (the fields packed in one argument, see [`crate::packed`]): what the master propagates
//!   for a call that changed a set, with its time and the id it chose, so a replica or an
//!   AOF replay reaches the same set, ids and expiry.
//! - `RL.LEASE.LOADCHUNK key next_id leases`: what an AOF rewrite emits to rebuild a set.

use std::ffi::CStr;

use redis_module::raw;

use crate::args::{integer_argument, is_keyword, parse_options, unit_keyword};
use crate::core::lease::{self, Acquired, LeaseError, LeaseLimiter, LeaseSet};
use crate::core::request::Request;
use crate::core::time::{Rounding, Unit};
use crate::error::CommandError;
use crate::packed::{self, Packed};
use crate::redis::clock;
use crate::redis::engine::Mode;
use crate::redis::handler::{self, Invocation, LimiterReply};
use crate::redis::key::{Access, LimiterKey};
use crate::redis::metadata::{Arg, ArgKind, CommandSpec, Keys};
use crate::redis::stats::{CommandStats, Outcome};

use super::{internal_only, limiter_spec, QUANTITY_ARG, UNIT_ARG, WRITE_KEY_FLAGS};

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

/// `RL.ACQUIRE`'s registration.
pub static ACQUIRE_SPEC: CommandSpec = limiter_spec(
    ACQUIRE,
    rl_acquire,
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
    rl_acquire_ro,
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
    rl_release,
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
    rl_renew,
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
    handler: rl_lease_apply,
    flags: c"write fast",
    arity: -3,
    summary:
        c"Internal: applies a lease change with the master's time and id (replication and AOF only)",
    complexity: ACQUIRE_COMPLEXITY,
    since: c"0.2.0",
    acl_categories: c"write fast",
    in_module_category: false,
    keys: Keys::One(WRITE_KEY_FLAGS),
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
    handler: rl_lease_load_chunk,
    flags: c"write",
    arity: 4,
    summary: c"Internal: appends serialized leases to a lease set (AOF rewrite only)",
    complexity: c"O(N) for N leases",
    since: c"0.2.0",
    acl_categories: c"write slow",
    in_module_category: false,
    keys: Keys::One(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_INSERT),
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

handler::command_callback!(rl_acquire, ACQUIRE_SPEC, run_acquire, Mode::Write);
handler::command_callback!(rl_acquire_ro, ACQUIRE_RO_SPEC, run_acquire, Mode::ReadOnly);
handler::command_callback!(rl_release, RELEASE_SPEC, release);
handler::command_callback!(rl_renew, RENEW_SPEC, renew);
handler::command_callback!(rl_lease_apply, APPLY_SPEC, apply);
handler::command_callback!(rl_lease_load_chunk, LOAD_CHUNK_SPEC, load_chunk);

fn lease_error(error: LeaseError) -> CommandError {
    CommandError::Message(match error {
        LeaseError::NonPositiveLimit => c"ERR limit must be positive",
        LeaseError::LimitTooHigh => c"ERR limit is too high for RL.ACQUIRE: at most 65536",
        LeaseError::NonPositiveLease => c"ERR lease must be positive",
        LeaseError::LeaseTooLong => {
            c"ERR lease is too long: the limit is 2^63 nanoseconds (292 years)"
        }
    })
}

const _: () = assert!(lease::MAX_LIMIT == 65_536, "lease_error names the maximum");

/// A lease id argument: a positive integer.
fn lease_id(arg: &[u8]) -> Result<u64, CommandError> {
    let id = integer_argument(arg, c"ERR id is not an integer or out of range")?;
    u64::try_from(id)
        .ok()
        .filter(|&id| id > 0)
        .ok_or(CommandError::Message(c"ERR id must be positive"))
}

/// A change a call made to a lease set, to propagate.
enum Change {
    Acquire {
        limiter: LeaseLimiter,
        quantity: u64,
        id: u64,
    },
    Release(u64),
    Renew {
        id: u64,
        lease: i64,
    },
}

/// The reply of `RL.ACQUIRE`: the five integers and the id (0 when none was given).
struct AcquireReply {
    reply: LimiterReply,
    id: u64,
}

impl handler::Reply for AcquireReply {
    unsafe fn send(self, ctx: *mut raw::RedisModuleCtx) {
        let [limited, limit, remaining, retry, reset] = self.reply.fields;
        unsafe { [limited, limit, remaining, retry, reset, self.id as i64].send(ctx) }
    }

    fn outcome(&self) -> Outcome {
        self.reply.outcome()
    }
}

/// A reply of 1 or 0: whether the lease was held.
struct Held(bool);

impl handler::Reply for Held {
    unsafe fn send(self, ctx: *mut raw::RedisModuleCtx) {
        unsafe { raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, i64::from(self.0)) };
    }

    fn outcome(&self) -> Outcome {
        if self.0 {
            Outcome::Allowed
        } else {
            Outcome::Limited
        }
    }
}

fn run_acquire(call: &Invocation, mode: Mode) -> Result<AcquireReply, CommandError> {
    let [limit, lease, tail @ ..] = &call.args[2..] else {
        return Err(CommandError::WrongArity);
    };
    let limit = integer_argument(limit, c"ERR limit is not an integer or out of range")?;
    let lease = integer_argument(lease, c"ERR lease is not an integer or out of range")?;
    let options = parse_options(tail, ACQUIRE_USAGE, |_, _| Ok(false))?;
    if options.refund || options.block.is_some() {
        return Err(ACQUIRE_USAGE);
    }
    let limiter = LeaseLimiter::new(limit, lease, options.unit).map_err(lease_error)?;
    let quantity = options.quantity;
    let now = clock::now_micros();
    let acquired = if mode == Mode::Write && quantity > 0 && quantity <= limiter.limit() {
        change_set(call, now, true, |set| {
            let acquired = limiter.acquire(set, now, quantity, None);
            let change = acquired.id.map(|id| Change::Acquire {
                limiter,
                quantity,
                id,
            });
            (acquired, change)
        })?
        .expect("a set is created when missing")
    } else {
        // Peeks, quantities that never fit and dry runs only read.
        let key = LimiterKey::open(call, call.key_name(), Access::Read)?;
        let set = key.native_view::<LeaseSet>()?;
        Acquired {
            verdict: limiter.inspect(set.as_deref(), now, quantity),
            id: None,
        }
    };
    Ok(AcquireReply {
        reply: LimiterReply {
            fields: acquired.verdict.to_reply(options.unit, Rounding::Up),
            details: None,
            request: Request::take(quantity),
        },
        id: acquired.id.unwrap_or(0),
    })
}

fn release(call: &Invocation) -> Result<Held, CommandError> {
    let id = lease_id(call.args[2])?;
    let now = clock::now_micros();
    let held = change_set(call, now, false, |set| released(set, now, id))?;
    Ok(Held(held.unwrap_or(false)))
}

fn renew(call: &Invocation) -> Result<Held, CommandError> {
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
    let lease = lease::lease_micros(lease, unit).map_err(lease_error)?;
    let now = clock::now_micros();
    let renewed = change_set(call, now, false, |set| renewed(set, now, id, lease))?;
    Ok(Held(renewed.unwrap_or(false)))
}

/// Releases lease `id` of `set`: whether it was held, and the change when anything changed
/// (the lease freed, or others that ended dropped on the way).
fn released(set: &mut LeaseSet, now: i64, id: u64) -> (bool, Option<Change>) {
    let before = set.len();
    let held = lease::release(set, now, id);
    (held, (set.len() != before).then_some(Change::Release(id)))
}

/// Renews lease `id` of `set` to `lease` µs: whether it was held, and the change when
/// anything changed.
fn renewed(set: &mut LeaseSet, now: i64, id: u64, lease: i64) -> (bool, Option<Change>) {
    let before = set.len();
    let held = lease::renew(set, now, id, lease);
    let changed = held || set.len() != before;
    (held, changed.then_some(Change::Renew { id, lease }))
}

/// Runs `operation` on the call's lease set at `now` — on a new, empty one when the key does
/// not exist and `create` says so, else not at all (`None`) — then stores, expires,
/// signals and propagates the change it reports: the set's new state, or the key deleted
/// when no lease is left.
fn change_set<R>(
    call: &Invocation,
    now: i64,
    create: bool,
    operation: impl FnOnce(&mut LeaseSet) -> (R, Option<Change>),
) -> Result<Option<R>, CommandError> {
    let mut key = LimiterKey::open(call, call.key_name(), Access::Write)?;
    let (reply, change, expire_at_ms) = match key.native_borrow::<LeaseSet>()? {
        Some(mut set) => {
            let (reply, change) = operation(&mut set);
            (reply, change, lease::expire_at_ms(&set))
        }
        None if create => {
            let mut set = LeaseSet::default();
            let (reply, change) = operation(&mut set);
            let expire_at_ms = lease::expire_at_ms(&set);
            if change.is_some() && expire_at_ms.is_some() {
                key.set_native(set)?;
            }
            (reply, change, expire_at_ms)
        }
        None => return Ok(None),
    };
    if let Some(change) = change {
        match expire_at_ms {
            Some(expire_at_ms) => key.changed_in_place(Some(expire_at_ms))?,
            None => key.delete(raw::REDISMODULE_NOTIFY_MODULE)?,
        }
        key.propagate(|| propagate(call, &key, now, &change));
    }
    Ok(Some(reply))
}

/// Propagates a change as `RL.LEASE.APPLY` with the call's time, its fields packed in one
/// argument, or as it came when the call is one.
fn propagate(call: &Invocation, key: &LimiterKey, now: i64, change: &Change) {
    // SAFETY: the running command's context and key; the fields outlive the call.
    unsafe {
        if std::ptr::eq(call.spec, &APPLY_SPEC) {
            raw::RedisModule_ReplicateVerbatim.unwrap()(call.ctx);
            return;
        }
        let mut fields = Packed::default();
        match change {
            Change::Acquire {
                limiter,
                quantity,
                id,
            } => fields
                .word("ACQUIRE")
                .int(now)
                .int(limiter.limit() as i64)
                .int(limiter.lease_micros())
                .int(*quantity as i64)
                .int(*id as i64),
            Change::Release(id) => fields.word("RELEASE").int(now).int(*id as i64),
            Change::Renew { id, lease } => {
                fields.word("RENEW").int(now).int(*id as i64).int(*lease)
            }
        };
        let fields = fields.as_bytes();
        raw::RedisModule_Replicate.unwrap()(
            call.ctx,
            c"RL.LEASE.APPLY".as_ptr(),
            c"sb".as_ptr(),
            key.name(),
            fields.as_ptr(),
            fields.len(),
        );
    }
}

/// Applies a change a master propagated, with its time and id.
fn apply(call: &Invocation) -> Result<(), CommandError> {
    internal_only(call)?;
    let mut unpacked = [&[][..]; 6];
    let fields = packed::unpack(&call.args[2..], &mut unpacked).ok_or(APPLY_INVALID)?;
    let [change, now, rest @ ..] = fields else {
        return Err(APPLY_INVALID);
    };
    let integer = |arg| integer_argument(arg, c"ERR RL.LEASE.APPLY takes integers");
    let now = integer(now)?;
    if is_keyword(change, "ACQUIRE") {
        let [limit, lease, quantity, id] = rest else {
            return Err(APPLY_INVALID);
        };
        let limiter = LeaseLimiter::new(integer(limit)?, integer(lease)?, Unit::Microseconds)
            .map_err(lease_error)?;
        let quantity = u64::try_from(integer(quantity)?)
            .ok()
            .filter(|quantity| (1..=limiter.limit()).contains(quantity))
            .ok_or(APPLY_INVALID)?;
        let id = lease_id(id)?;
        change_set(call, now, true, |set| {
            let acquired = limiter.acquire(set, now, quantity, Some(id));
            let change = acquired.id.map(|id| Change::Acquire {
                limiter,
                quantity,
                id,
            });
            ((), change)
        })?;
    } else if is_keyword(change, "RELEASE") {
        let [id] = rest else {
            return Err(APPLY_INVALID);
        };
        let id = lease_id(id)?;
        change_set(call, now, false, |set| ((), released(set, now, id).1))?;
    } else if is_keyword(change, "RENEW") {
        let [id, lease] = rest else {
            return Err(APPLY_INVALID);
        };
        let (id, lease) = (lease_id(id)?, integer(lease)?);
        change_set(call, now, false, |set| ((), renewed(set, now, id, lease).1))?;
    } else {
        return Err(APPLY_INVALID);
    }
    Ok(())
}

fn load_chunk(call: &Invocation) -> Result<(), CommandError> {
    internal_only(call)?;
    let invalid =
        CommandError::Message(c"ERR RL.LEASE.LOADCHUNK: not a whole number of ordered leases");
    let next_id = u64::try_from(integer_argument(
        call.args[2],
        c"ERR RL.LEASE.LOADCHUNK takes integers",
    )?)
    .map_err(|_| invalid)?;
    let leases = call.args[3];
    let mut key = LimiterKey::open(call, call.key_name(), Access::Write)?;
    match key.native_borrow::<LeaseSet>()? {
        Some(mut set) => set.append_serialized(next_id, leases).ok_or(invalid)?,
        None => {
            let mut set = LeaseSet::default();
            set.append_serialized(next_id, leases).ok_or(invalid)?;
            key.set_native(set)?;
        }
    }
    key.changed_in_place(None)?;
    // SAFETY: the running command's context.
    unsafe { raw::RedisModule_ReplicateVerbatim.unwrap()(call.ctx) };
    Ok(())
}
