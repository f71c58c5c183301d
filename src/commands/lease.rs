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

use crate::core::effect::{Effect, LeaseApplied, LeaseChange, LeaseEffect};
use crate::core::engine::{self, Applied, Store};
use crate::core::lease::LeaseLimiter;
use crate::core::limiter::Limiter;
use crate::core::params::{self, MAX_LEASE_LIMIT};
use crate::core::time::{Rounding, Unit};
use crate::error::CommandError;
use crate::options::{integer_argument, unit_keyword};
use crate::redis::call::{Invocation, Reply};
use crate::redis::clock;
use crate::redis::registration::{Arg, ArgKind, Mode};
use crate::redis::store::RedisStore;

use super::grammar::{parse_options, Refuser, QUANTITY_ARG, UNIT_ARG};
use super::limiting::one_limiter;

pub(super) const ACQUIRE_ARGS: &[Arg] = &[
    Arg::new(c"key", ArgKind::Key),
    Arg::new(c"limit", ArgKind::Integer),
    Arg::new(c"lease", ArgKind::Integer),
    QUANTITY_ARG,
    UNIT_ARG,
];

pub(super) const ACQUIRE_COMPLEXITY: &CStr =
    c"O(1) amortised when leases share a duration, O(N) for N leases held otherwise";

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

pub(super) fn acquire(call: &Invocation, mode: Mode) -> Result<Reply, CommandError> {
    let [limit, lease, tail @ ..] = &call.args[2..] else {
        return Err(CommandError::WrongArity);
    };
    let limit = integer_argument(limit, c"ERR limit is not an integer or out of range")?;
    let lease = integer_argument(lease, c"ERR lease is not an integer or out of range")?;
    let options = parse_options(tail, |_, _| Ok(false))?;
    options.refuse_every(Refuser::Acquire)?;
    let limiter = Limiter::Lease(LeaseLimiter::new(limit, lease, options.unit)?);
    one_limiter(call, limiter, &options, mode, Rounding::Up)
}

pub(super) fn release(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let id = lease_id(call.args[2])?;
    change(call, LeaseChange::Release { id })
}

pub(super) fn renew(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let [id, lease, tail @ ..] = &call.args[2..] else {
        return Err(CommandError::WrongArity);
    };
    let id = lease_id(id)?;
    let lease = integer_argument(lease, c"ERR lease is not an integer or out of range")?;
    let unit = match tail {
        [] => Unit::Seconds,
        [unit] => unit_keyword(unit).ok_or(CommandError::Syntax)?,
        _ => return Err(CommandError::Syntax),
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
