//! The one engine behind every limiter command: a call names one limiter (`CL.THROTTLE`,
//! `RL.WINDOW`, `RL.LOG`, `RL.ACQUIRE`) or several (`RL.ALL`), each on its own key, and asks
//! them one [`Request`]. [`decide_and_commit`]
//!
//! 1. opens every key and decides every limiter, writing nothing (a bad key anywhere, a
//!    `WRONGTYPE`, stops the call before any write): [`plan`];
//! 2. settles the call ([`Settlement`]): a take is admitted only if every limiter admits
//!    it; a refund always is; a take that does not fit now goes by its option
//!    ([`shortfall`]: `DELAY`, `AT_MOST`, `FORCE`);
//! 3. stores what the settled call changes (every limiter's new state when admitted, only
//!    the blocks a refusal starts otherwise, nothing for a read-only call), each write
//!    carrying its effect for replicas and the AOF. A log's or a lease set's change is an
//!    [`Effect`] the master applies as its copies do ([`apply`]).
//!
//! Where the keys live is the [`Store`]'s business ([`store`]): Redis keys in the server
//! (`crate::redis::store`), a map in the tests ([`memory`]).

use super::all_or_none::{Conclusion, Settlement};
use super::codec::Placement;
use super::effect::{
    Effect, LeaseApplied, LeaseChange, LeaseEffect, LogApplied, LogChange, LogEffect,
};
use super::lease::{self, LeaseSet};
use super::limiter::{Limiter, LogWrite, StringWrite};
use super::load::{is_load_length, LoadError, LoadState, Policy, Report, Standing};
use super::log::SlidingLog;
use super::request::{Action, Request, Shortfall};
use super::time::Micros;
use super::verdict::Verdict;
use super::windows::Scratch;
use super::windows::StateError;

/// The most limiters one call names.
pub const MAX_LIMITERS: usize = 16;

/// What one call asks.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// The limiters, one per key, in order (at most [`MAX_LIMITERS`]).
    pub limiters: &'a [Limiter],
    /// The request, the same for every limiter.
    pub request: Request,
    /// The call's time, read once, on the master.
    pub now: Micros,
    /// Whether the call may write: false for the read-only variants.
    pub write: bool,
    /// A value no client can predict, from which a lease the call takes draws its id
    /// ([`lease::draw_id`]) and a load gate its draw; any value where neither is.
    pub seed: u64,
}

/// A call's working memory, kept from call to call so that a warm call allocates nothing.
#[derive(Default)]
pub struct Working {
    /// The new string state of each limiter.
    buffers: [Vec<u8>; MAX_LIMITERS],
    /// What a standing's peek writes (nothing, but it needs a place).
    peek: Vec<u8>,
    /// The window counters' working memory.
    scratch: Scratch,
}

impl Working {
    /// Empty working memory; it grows as calls need.
    pub const fn new() -> Working {
        Working {
            buffers: [const { Vec::new() }; MAX_LIMITERS],
            peek: Vec::new(),
            scratch: Scratch::new(),
        }
    }
}

/// Runs `call` on `store`, writing each limiter's reply to `verdicts` (in the limiters'
/// order), as described in the module's documentation. `N`, at least the number of
/// limiters, sizes the call's working state: a command of one limiter pays for one.
///
/// A take that does not fit now settles by its [`Shortfall`], a rule for every limiter:
/// refused; delayed to the earliest time every limiter admits it, when that is soon
/// enough; cut to what fits now; or forced, each limiter charging the rest when it fits.
pub fn decide_and_commit<S: Store, const N: usize>(
    store: &S,
    call: &Call,
    working: &mut Working,
    verdicts: &mut [Verdict],
) -> Result<Settled, S::Error> {
    let Working {
        buffers,
        peek,
        scratch,
    } = working;
    // At most N: a bound the compiler sees, so that a call of one limiter runs no loop.
    let count = call.limiters.len().min(N);
    debug_assert!((1..=N.min(MAX_LIMITERS)).contains(&count) && verdicts.len() == count);
    let mut keys: [Option<S::Key<'_>>; N] = [const { None }; N];
    let mut decisions = [Decision::NOTHING; N];
    for index in 0..count {
        let limiter = &call.limiters[index];
        let write = call.write && limiter.writes() && call.request.may_write(limiter.limit());
        let key = keys[index].insert(store.open(index, write)?);
        let buffer = &mut buffers[index];
        decisions[index] = decide(
            limiter,
            key,
            call.now,
            &call.request,
            call.seed,
            buffer,
            scratch,
            &mut verdicts[index],
        )?;
    }
    // A request the load gate sheds goes no further: no limiter is charged or blocked, and
    // no shortfall rule applies (it is not waited out, cut or forced).
    let shed = (0..count)
        .any(|index| matches!(decisions[index].plan, Plan::Gate(_)) && verdicts[index].limited);
    let mut request = call.request;
    let mut settled = Settled::default();
    let refused = verdicts.iter().any(|verdict| verdict.limited);
    if refused && !shed && request.shortfall != Shortfall::Refuse && request.action == Action::Take
    {
        let mut all = All {
            limiters: &call.limiters[..count],
            keys: &keys[..count],
            buffers: &mut buffers[..count],
            decisions: &mut decisions[..count],
            verdicts,
            scratch,
            write: call.write,
        };
        (request, settled) = all.settle(call.now, request, peek)?;
    }
    let mut settlement = Settlement::of(
        &request,
        verdicts
            .iter()
            .zip(call.limiters)
            .map(|(verdict, limiter)| (*verdict, limiter.limit())),
    );
    if shed {
        settlement = settlement.shed();
    }
    settled.load = decisions[..count]
        .iter()
        .find_map(|decision| match decision.plan {
            Plan::Gate(level) => Some(LoadOutcome { level, shed }),
            _ => None,
        });
    if settlement.admitted && request.action == Action::Take {
        settled.granted = request.quantity;
        let takes_lease = decisions[..count]
            .iter()
            .any(|decision| matches!(decision.plan, Plan::Lease(_, true)));
        settled.lease_id = (takes_lease && call.write).then(|| lease::draw_id(call.seed));
    }
    for index in 0..count {
        let (Some(key), decision) = (&mut keys[index], &decisions[index]) else {
            continue;
        };
        let verdict = &mut verdicts[index];
        match settlement.conclusion(call.write, decision.writes_refused, verdict) {
            Conclusion::Commit => {
                let at = call.now + settled.wait;
                let lease_id = settled.lease_id;
                commit(
                    call,
                    (at, &request, lease_id),
                    key,
                    decision,
                    &buffers[index],
                    verdict,
                )?;
            }
            Conclusion::Standing => {
                *verdict = standing(call.now, &call.limiters[index], key, peek, scratch)?;
            }
            Conclusion::AsDecided => {}
        }
    }
    Ok(settled)
}

/// Stores what a limiter decided on its open key (`value`: the new string state), and
/// brings its reply, `verdict`, to the state after; `settled` is the time the request was
/// decided for, the request as the call settled it, and the lease id it takes.
#[inline(always)]
fn commit<K: Key>(
    call: &Call,
    settled: (Micros, &Request, Option<u64>),
    key: &mut K,
    decision: &Decision,
    value: &[u8],
    verdict: &mut Verdict,
) -> Result<(), K::Error> {
    let (at, request, lease_id) = settled;
    match decision.plan {
        Plan::String(StringWrite::Nothing) | Plan::Log(_, LogWrite::Nothing) => {}
        Plan::String(StringWrite::Store {
            expire_at,
            placement,
        }) => key.put_string(value, placement, expire_at)?,
        Plan::String(StringWrite::Delete) => key.delete()?,
        Plan::Log(limiter, write) => {
            let change = match write {
                LogWrite::Nothing => return Ok(()),
                LogWrite::Take => LogChange::Take {
                    quantity: request.quantity,
                    at,
                },
                LogWrite::Refund => LogChange::Refund {
                    quantity: request.quantity,
                },
                LogWrite::StartBlock(until) => LogChange::Block { until },
                LogWrite::Force => LogChange::Force {
                    quantity: request.quantity,
                },
            };
            let effect = LogEffect {
                limiter,
                now: call.now,
                change,
            };
            if let Some(Applied::Log(applied)) = apply(key, &Effect::Log(effect))? {
                if let Some(reply) = applied.reply {
                    *verdict = reply;
                }
            }
        }
        Plan::Lease(limiter, true) => {
            let Some(id) = lease_id else {
                return Ok(());
            };
            let effect = LeaseEffect {
                now: call.now,
                change: LeaseChange::Acquire {
                    limiter,
                    quantity: request.quantity,
                    id,
                },
            };
            apply(key, &Effect::Lease(effect))?;
        }
        Plan::Lease(_, false) | Plan::Gate(_) => {}
    }
    Ok(())
}

/// What applying a native value's effect did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// A log's change.
    Log(LogApplied),
    /// A lease set's change.
    Lease(LeaseApplied),
    /// A chunk an AOF rewrite emitted: whether it was whole and in order (else nothing
    /// changed).
    Chunk(bool),
}

/// Applies `effect`, a change to a native value, to its open `key`, and sends it on to
/// replicas and the AOF: the one path by which a master commits a log's or a lease set's
/// change and by which a replica, an AOF replay or a slot migration's target applies it.
/// `None` when the key does not exist and the effect does not create it (a release or a
/// renewal); a string effect is not applied here (the server applies those itself).
pub fn apply<K: Key>(key: &mut K, effect: &Effect) -> Result<Option<Applied>, K::Error> {
    let send = |_: &Applied| *effect;
    match *effect {
        Effect::Log(log_effect) => key.change_native(
            true,
            |log: &mut SlidingLog| {
                let applied = log_effect.apply(log);
                NativeChange {
                    reply: Applied::Log(applied),
                    changed: true,
                    after: After::expiring(applied.expire_at),
                }
            },
            send,
        ),
        Effect::Lease(lease_effect) => key.change_native(
            matches!(lease_effect.change, LeaseChange::Acquire { .. }),
            |set: &mut LeaseSet| {
                let applied = lease_effect.apply(set);
                NativeChange {
                    reply: Applied::Lease(applied),
                    changed: applied.changed,
                    after: After::expiring(lease::expire_at(set)),
                }
            },
            send,
        ),
        Effect::LogChunk {
            entries,
            blocked_until,
        } => key.change_native(
            true,
            |log: &mut SlidingLog| {
                let loaded = log.append_serialized(entries).is_some();
                if let Some(until) = blocked_until.filter(|_| loaded) {
                    log.set_blocked_until(until);
                }
                NativeChange {
                    reply: Applied::Chunk(loaded),
                    changed: loaded,
                    // The key's expiry comes after, as the AOF's own PEXPIREAT.
                    after: After::KeepsItsExpiry,
                }
            },
            send,
        ),
        Effect::LeaseChunk { next_id, leases } => key.change_native(
            true,
            |set: &mut LeaseSet| {
                let loaded = set.append_serialized(next_id, leases).is_some();
                NativeChange {
                    reply: Applied::Chunk(loaded),
                    changed: loaded,
                    after: After::KeepsItsExpiry,
                }
            },
            send,
        ),
        Effect::Set { .. }
        | Effect::SetPersistent { .. }
        | Effect::SetRange { .. }
        | Effect::ExpireAt(_)
        | Effect::Delete => Ok(None),
    }
}

/// A change to a service's load state.
#[derive(Clone, Debug)]
pub enum LoadChange {
    /// An instance's report (`RL.LOAD.REPORT`).
    Report(Report),
    /// A policy set, or the default back (`None`) (`RL.LOAD.POLICY`).
    Policy(Option<Policy>),
}

/// A service's load state on its open `key` at `now`: `None` when the key does not exist,
/// `WRONGTYPE` when it holds anything else (a string that is not a load state included).
pub fn load_state<K: Key>(key: &K) -> Result<Option<LoadState>, K::Error> {
    let Some(bytes) = key.string(is_load_length)? else {
        return Ok(None);
    };
    Ok(Some(LoadState::decode(bytes).ok_or(StateError::Foreign)?))
}

/// Applies `change` at `now` to the load state on `key` (a new one when the key does not
/// exist) and stores it whole, with its effect (`SET`): expiring with its last report, or
/// kept while it holds a policy, which is configuration. A change its checks refuse
/// (`LoadError`) writes nothing. The standing after, on success.
pub fn change_load<K: Key>(
    key: &mut K,
    change: LoadChange,
    now: Micros,
    buffer: &mut Vec<u8>,
) -> Result<Result<Standing, LoadError>, K::Error> {
    let mut state = load_state(key)?.unwrap_or_default();
    let standing = match change {
        LoadChange::Report(report) => state.report(report, now),
        LoadChange::Policy(policy) => state.set_policy(policy, now),
    };
    let Ok(standing) = standing else {
        return Ok(standing);
    };
    state.encode(now, buffer);
    match state.expires(now) {
        None => key.put_persistent(buffer)?,
        Some(end) if end > now => key.put_string(buffer, Placement::WHOLE, end.ceil_millis())?,
        // Nothing to keep: no policy, no live report.
        Some(_) => key.delete()?,
    }
    Ok(Ok(standing))
}

mod plan;
mod shortfall;
mod store;

use plan::{decide, standing, Decision, Plan};
pub use plan::{LoadOutcome, Settled};
use shortfall::All;
pub use store::{After, Key, NativeChange, Store};

#[cfg(test)]
pub mod memory;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod shortfall_tests;
