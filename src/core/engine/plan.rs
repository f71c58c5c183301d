//! One limiter's decision on its open key, changing nothing: its reply, and what it will store
//! if the call commits ([`Plan`]); and what a settled call did ([`Settled`]).

use super::store::Key;
use crate::core::lease::{LeaseLimiter, LeaseSet};
use crate::core::limiter::{decide_log, decide_string, Limiter, LogWrite, StringWrite};
use crate::core::load::LoadDecision;
use crate::core::log::{LogLimiter, SlidingLog};
use crate::core::request::{Action, Request};
use crate::core::time::{Micros, Ticks};
use crate::core::verdict::{RetryAfter, Verdict};
use crate::core::windows::Scratch;
use crate::core::windows::StateError;

impl Decision {
    /// Nothing decided yet.
    pub(super) const NOTHING: Decision = Decision {
        plan: Plan::String(StringWrite::Nothing),
        writes_refused: false,
    };
}

/// What one limiter will store if the call commits.
#[derive(Clone, Copy, Debug)]
pub(super) enum Plan {
    String(StringWrite),
    /// A log's change, for the request as the call settled it (a delayed request at its
    /// time, a partial one for what was granted).
    Log(LogLimiter, LogWrite),
    /// A lease, and whether it is taken if the call is admitted (under the one id the call
    /// draws, [`crate::core::lease::draw_id`]).
    Lease(LeaseLimiter, bool),
    /// The load gate, which writes nothing: the level it found.
    Gate(u8),
}

/// What one limiter decided to store, having changed nothing (its reply is kept apart).
#[derive(Clone, Copy, Debug)]
pub(super) struct Decision {
    pub(super) plan: Plan,
    /// Whether the plan stores even though this limiter refuses: a block its refusal starts,
    /// or a `CL.THROTTLE` state carried to new parameters.
    pub(super) writes_refused: bool,
}

/// What a settled call did, besides each limiter's reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// How long the caller waits before going ahead (`DELAY`); 0: at once, or refused.
    pub wait: Micros,
    /// The quantity admitted: all of it, what fit (`AT_MOST`), or 0 when refused.
    pub granted: u64,
    /// Whether some limiter was charged beyond what fit now (`FORCE`).
    pub forced: bool,
    /// The id of the lease an admitted call took (one id for every `LEASE` limiter).
    pub lease_id: Option<u64>,
    /// With a load gate: the level it found, and whether it shed the request.
    pub load: Option<LoadOutcome>,
}

/// What a call's load gate found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOutcome {
    /// The service's level.
    pub level: u8,
    /// Whether the gate shed the request (the level's share of its class did not admit it).
    pub shed: bool,
}

/// Decides `limiter` on its open `key` for `request` at `at`, changing nothing: its reply
/// goes to `verdict`, a new string state to `buffer`.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // The engine's working parts, lent to one decision.
pub(super) fn decide<K: Key>(
    limiter: &Limiter,
    key: &K,
    at: Micros,
    request: &Request,
    seed: u64,
    buffer: &mut Vec<u8>,
    scratch: &mut Scratch,
    verdict: &mut Verdict,
) -> Result<Decision, K::Error> {
    Ok(match limiter {
        Limiter::Log(log_limiter) => {
            let log = key.native::<SlidingLog>()?;
            let write;
            (*verdict, write) = decide_log(log_limiter, log.as_deref(), at, request);
            Decision {
                plan: Plan::Log(*log_limiter, write),
                writes_refused: matches!(write, LogWrite::StartBlock(_)),
            }
        }
        Limiter::Lease(lease_limiter) => {
            let set = key.native::<LeaseSet>()?;
            let take = match request.action {
                Action::Take => request.quantity,
                Action::Refund => 0, // The commands refuse REFUND with a lease.
            };
            *verdict = lease_limiter.inspect(set.as_deref(), at, take);
            let acquires = !verdict.limited && request.may_write(lease_limiter.limit());
            Decision {
                plan: Plan::Lease(*lease_limiter, acquires),
                writes_refused: false,
            }
        }
        Limiter::Load(gate) => {
            let stored = key.string(|len| limiter.accepts_length(len))?;
            let mut decision = gate
                .decide(stored, at, load_draw(seed))
                .ok_or(StateError::Foreign)?;
            // A refund passes the gate: it gives back, it asks for nothing.
            decision.admitted |= request.action == Action::Refund;
            *verdict = gate_verdict(&decision);
            Decision {
                plan: Plan::Gate(decision.level),
                writes_refused: false,
            }
        }
        limiter => {
            let stored = key.string(|len| limiter.accepts_length(len))?;
            let decision = decide_string(limiter, stored, at, request, true, scratch, buffer)?;
            *verdict = decision.verdict;
            Decision {
                plan: Plan::String(decision.write),
                writes_refused: decision.writes_refused,
            }
        }
    })
}

/// The load gate's own reply: admitted, it says nothing (no limit, nothing remaining, which
/// the other limiters' replies give); shed, it is refused with the wait its policy sets.
fn gate_verdict(decision: &LoadDecision) -> Verdict {
    Verdict {
        limited: !decision.admitted,
        limit: 0,
        remaining: 0,
        retry_after: if decision.admitted {
            RetryAfter::NONE
        } else {
            RetryAfter::of(decision.retry.ticks())
        },
        reset_after: Ticks::ZERO,
    }
}

/// The load gate's draw from the call's seed: mixed (splitmix64's finalizer), so that it
/// owes nothing to the lease id the same seed gives.
fn load_draw(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `limiter`'s standing on its open `key`, uncharged, as a peek sees it.
pub(super) fn standing<K: Key>(
    now: Micros,
    limiter: &Limiter,
    key: &K,
    peek: &mut Vec<u8>,
    scratch: &mut Scratch,
) -> Result<Verdict, K::Error> {
    let look = Request::take(0);
    Ok(match limiter {
        Limiter::Log(log_limiter) => {
            let log = key.native::<SlidingLog>()?;
            decide_log(log_limiter, log.as_deref(), now, &look).0
        }
        Limiter::Lease(lease_limiter) => {
            let set = key.native::<LeaseSet>()?;
            lease_limiter.inspect(set.as_deref(), now, 0)
        }
        Limiter::Load(_) => gate_verdict(&LoadDecision {
            level: 0,
            admitted: true,
            retry: Micros::ZERO,
        }),
        limiter => {
            let stored = key.string(|len| limiter.accepts_length(len))?;
            decide_string(limiter, stored, now, &look, false, scratch, peek)?.verdict
        }
    })
}
