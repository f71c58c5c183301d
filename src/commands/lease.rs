//! Concurrency limits with leases, one native key per limiter:
//!
//! - `RL.ACQUIRE key limit lease [quantity] [S | MS | US]` takes `quantity` slots for a
//!   lease of `lease`; replies the five integers and the lease's id (0 when refused or
//!   peeked). `RL.ACQUIRE_RO` replies the same without writing.
//! - `RL.RELEASE key id` frees a lease at once: 1 if it was held, else 0.
//! - `RL.RENEW key id lease [S | MS | US]` extends a held lease to `lease` from now: 1, or 0
//!   if it is no longer held.
//!
//! `RL.ACQUIRE` runs through the engine (a lease is one of its limiters, which `RL.ALL`
//! takes too, as `LEASE limit lease`); a release or a renewal is a lease set's change
//! applied as its effect (`core::effect::LeaseEffect`), the path a replica takes.

use std::ffi::CStr;

use crate::args::{integer_argument, parse_options, unit_keyword};
use crate::core::effect::{Effect, LeaseApplied, LeaseChange, LeaseEffect};
use crate::core::engine::{self, Applied, Store};
use crate::core::lease::LeaseLimiter;
use crate::core::limiter::Limiter;
use crate::core::params::{self, MAX_LEASE_LIMIT};
use crate::core::request::Shortfall;
use crate::core::time::{Rounding, Unit};
use crate::error::CommandError;
use crate::redis::call::{Invocation, Reply};
use crate::redis::clock;
use crate::redis::handler::{callback, Registered};
use crate::redis::metadata::{Arg, ArgKind, CommandSpec, Mode};
use crate::redis::stats::CommandStats;
use crate::redis::store::RedisStore;

use super::{limiter_spec, single, QUANTITY_ARG, UNIT_ARG};

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

pub(super) const ACQUIRE_USAGE: CommandError = CommandError::Message(
    c"ERR syntax error. Usage: RL.ACQUIRE key limit lease [quantity] [S|MS|US]",
);

pub(super) const RENEW_USAGE: CommandError =
    CommandError::Message(c"ERR syntax error. Usage: RL.RENEW key id lease [S|MS|US]");

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
    let limiter = Limiter::Lease(LeaseLimiter::new(limit, lease, options.unit)?);
    single(call, limiter, &options, mode, Rounding::Up)
}

fn release(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let id = lease_id(call.args[2])?;
    change(call, LeaseChange::Release { id })
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
    change(call, LeaseChange::Renew { id, lease })
}

/// Applies `change` to the call's lease set at the master's time, as a replica will: 1 when
/// the lease was held (and is now released or renewed), else 0.
fn change(call: &Invocation, change: LeaseChange) -> Result<Reply, CommandError> {
    let effect = Effect::Lease(LeaseEffect {
        now: clock::now(),
        change,
    });
    let store = RedisStore::single(call, false);
    let mut key = store.open(0, true)?;
    let held = matches!(
        engine::apply(&mut key, &effect)?,
        Some(Applied::Lease(LeaseApplied { done: true, .. }))
    );
    Ok(Reply::Held(held))
}
