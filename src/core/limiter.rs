//! One limiter of any algorithm, and its decision for a request with the block rules
//! applied: what the Redis layer replies and stores for it.
//!
//! - String states (`CL.THROTTLE`'s GCRA, `RL.WINDOW`'s counters) are decided in one step
//!   that appends the new value to a buffer; the layer stores it only if the call commits.
//! - Logs (`RL.LOG`) are decided on the log as it is, then changed in place if the call
//!   commits.
//!
//! Deciding never changes anything, so a call over several limiters (`RL.ALL`) decides all
//! of them before it stores any.

use super::block::{self, Write};
use super::codec::{
    decode_gcra_state, encode_gcra, encode_warm_gcra, is_gcra_length, is_state_length,
    push_blocked_header, split_blocked, Placement, Written,
};
use super::gcra::{Basis, Gcra, GcraState};
use super::lease::LeaseLimiter;
use super::load::{is_load_length, LoadGate};
use super::log::{LogLimiter, SlidingLog};
use super::params::MAX_DEBT_LIMITS;
use super::request::{Action, Request};
use super::time::{Micros, Millis, Ticks};
use super::verdict::{RetryAfter, Verdict};
use super::windows::{is_window_length, Scratch, StateError, WindowLimiter};

/// A limiter's parameters, validated, for one of the algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limiter {
    /// GCRA (`CL.THROTTLE`, `RL.ALL ... THROTTLE`).
    Throttle(Gcra),
    /// Window counters (`RL.WINDOW`, `RL.ALL ... WINDOW`).
    Window(WindowLimiter),
    /// The sliding log (`RL.LOG`, `RL.ALL ... LOG`).
    Log(LogLimiter),
    /// A concurrency limit with leases (`RL.ACQUIRE`, `RL.ALL ... LEASE`).
    Lease(LeaseLimiter),
    /// The load gate (`RL.ALL ... LOAD priority`): the service's level admits a share of
    /// each priority; it never writes.
    Load(LoadGate),
}

impl Limiter {
    /// The largest quantity it ever admits at once.
    pub fn limit(&self) -> u64 {
        match self {
            Limiter::Throttle(gcra) => gcra.limit() as u64,
            Limiter::Window(window) => window.limit(),
            Limiter::Log(log) => log.limit(),
            Limiter::Lease(lease) => lease.limit(),
            // Any quantity passes the gate: it sheds by priority, not by quantity.
            Limiter::Load(_) => u64::MAX,
        }
    }

    /// When every request its stored string `state` counts may go ahead: a take goes no
    /// earlier (first come, first served). GCRA's state, the TAT, already holds its queue:
    /// `Micros::ZERO`.
    fn queue_end(&self, state: &[u8]) -> Micros {
        match self {
            Limiter::Window(window) => window.queue_end(state),
            Limiter::Throttle(_) | Limiter::Log(_) | Limiter::Lease(_) | Limiter::Load(_) => {
                Micros::ZERO
            }
        }
    }

    /// Whether the limiter may write: every one but the load gate.
    pub fn writes(&self) -> bool {
        !matches!(self, Limiter::Load(_))
    }

    /// Whether a string of `len` bytes may hold this limiter's state, blocked or not;
    /// false for a limiter whose state is not a string.
    pub fn accepts_length(&self, len: usize) -> bool {
        match self {
            Limiter::Throttle(_) => is_state_length(is_gcra_length, len),
            Limiter::Window(_) => is_state_length(is_window_length, len),
            Limiter::Load(_) => is_load_length(len),
            Limiter::Log(_) | Limiter::Lease(_) => false,
        }
    }
}

/// What to do with a string key after a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StringWrite {
    /// Nothing.
    Nothing,
    /// Store the bytes the decision wrote to its buffer where `placement` says, the key
    /// expiring at `expire_at`.
    Store {
        /// When the key expires.
        expire_at: Millis,
        /// Where the bytes go, and whether the expiry moved.
        placement: Placement,
    },
    /// Delete the key: a refund left nothing counted, and no block is in force.
    Delete,
}

/// A decision on a string key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StringDecision {
    /// The reply, before rounding.
    pub verdict: Verdict,
    /// What to store.
    pub write: StringWrite,
    /// Whether it stores what it stores even though it refuses: a block this refusal
    /// starts, or a `CL.THROTTLE` state carried to the call's new parameters, so that what
    /// was used drains at the new rate from this refusal on, as its `retry_after` says.
    pub writes_refused: bool,
}

/// What an algorithm alone decided on a string state.
struct Own {
    verdict: Verdict,
    /// Whether its state changes (the new state was appended to the buffer).
    changes: bool,
    /// Whether a refused take carried the stored state to new parameters (that state was
    /// appended to the buffer).
    carried: bool,
    /// When the new state stops mattering, or `None` when nothing counts.
    expire_at: Option<Millis>,
    /// Where its bytes go.
    placement: Placement,
}

/// Decides `request` at `now` for a limiter whose state is a string, given the key's value
/// (`None` for a missing key). What to store is appended to `value` (cleared first);
/// `in_place` allows it to be the bytes that change at the end of `stored` (a placement
/// past 0), when `stored` is the key's value. `StateError` when the value is not this
/// limiter's state; a `Log` limiter has no string state and always gets `Foreign`.
///
/// A take that comes while requests are scheduled ahead of it (`DELAY`, `FORCE`) is refused:
/// its turn comes when they have gone, and its wait says when it fits after them.
#[inline(always)]
pub fn decide_string(
    limiter: &Limiter,
    stored: Option<&[u8]>,
    now: Micros,
    request: &Request,
    in_place: bool,
    scratch: &mut Scratch,
    value: &mut Vec<u8>,
) -> Result<StringDecision, StateError> {
    let (blocked_until, own_state) = stored.map_or((Micros::ZERO, None), split_blocked);
    // Only a value that is the algorithm's state alone can be patched in place.
    let patch =
        in_place && own_state.is_some() && own_state.map(<[u8]>::len) == stored.map(<[u8]>::len);
    value.clear();
    // A refund during a block stores its state behind the block's header.
    let kept_block =
        block::in_force(blocked_until, now).filter(|_| request.action == Action::Refund);
    if let Some(until) = kept_block {
        push_blocked_header(until, value);
    }
    let queue_end = match (request.action, own_state) {
        (Action::Take, Some(state)) => limiter.queue_end(state),
        _ => Micros::ZERO,
    };
    let mut own = if queue_end > now {
        queued(limiter, own_state, now, queue_end, request, scratch, value)?
    } else {
        decide_own(limiter, own_state, now, request, patch, scratch, value)?
    };
    if blocked_take(request, blocked_until, now, &own.verdict) {
        // Refused by the block alone: the standing is the uncharged one.
        let peek = Request::take(0);
        own.verdict = decide_own(limiter, own_state, now, &peek, patch, scratch, value)?.verdict;
    }
    let decision = block::decide(request, blocked_until, now, own.verdict, own.changes);
    let carried = own.carried
        && own.expire_at.is_some()
        && decision.write == Write::Nothing
        && blocked_until <= now;
    let write = match decision.write {
        Write::Nothing if carried => StringWrite::Store {
            expire_at: own.expire_at.unwrap_or_default(),
            placement: Placement::WHOLE,
        },
        Write::Nothing => StringWrite::Nothing,
        Write::State => match (own.expire_at, kept_block) {
            (None, None) => StringWrite::Delete,
            (expire_at, Some(until)) => StringWrite::Store {
                expire_at: expire_at.unwrap_or_default().max(until.ceil_millis()),
                placement: Placement::WHOLE,
            },
            (Some(expire_at), None) => StringWrite::Store {
                expire_at,
                placement: own.placement,
            },
        },
        Write::StartBlock(until) => {
            // The block starts from none: the header alone, until its end.
            value.clear();
            push_blocked_header(until, value);
            StringWrite::Store {
                expire_at: until.ceil_millis(),
                placement: Placement::WHOLE,
            }
        }
    };
    Ok(StringDecision {
        verdict: decision.verdict,
        write,
        writes_refused: carried || matches!(decision.write, Write::StartBlock(_)),
    })
}

/// The most steps a `FORCE` takes to place its quantity: one limit's worth takes at most
/// two (what fits, then the wait for the next), and a call charges at most
/// [`MAX_DEBT_LIMITS`] limits.
const MAX_FORCE_STEPS: usize = 2 * MAX_DEBT_LIMITS as usize + 4;

/// Decides a `FORCE` take of `quantity` at `now` that does not all fit now: what fits is
/// charged now, and the rest at the earliest times it fits, a limit's worth at a time, as
/// `DELAY` would schedule it without a bound. The request is admitted; the later charges
/// are a debt the limiter's next requests wait out. What to store is left in `value`, whole;
/// `spare` is working memory. The caller checked the quantity
/// ([`super::params::force_quantity`]).
pub fn force_string(
    limiter: &Limiter,
    stored: Option<&[u8]>,
    now: Micros,
    quantity: u64,
    scratch: &mut Scratch,
    value: &mut Vec<u8>,
    spare: &mut Vec<u8>,
) -> Result<StringDecision, StateError> {
    if let Limiter::Throttle(gcra) = limiter {
        if gcra.warms_up() {
            return force_warming(gcra, stored, now, quantity, value);
        }
    }
    let limit = limiter.limit();
    let (mut at, mut left) = (now, quantity);
    // The last step that charged something.
    let mut charged = None;
    // Whether `value` holds the state so far (else it is still `stored`).
    let mut in_value = false;
    for _ in 0..MAX_FORCE_STEPS {
        let state = if in_value { Some(&value[..]) } else { stored };
        let part = left.min(limit);
        // Each step reads the state the one before wrote: every value is whole.
        let mut decision = decide_string(
            limiter,
            state,
            at,
            &Request::take(part),
            false,
            scratch,
            spare,
        )?;
        if decision.verdict.limited {
            let fits = u64::try_from(decision.verdict.remaining)
                .unwrap_or(0)
                .min(part);
            if fits == 0 {
                let wait = decision
                    .verdict
                    .retry_after
                    .get()
                    .ok_or(StateError::Foreign)?;
                at = at.saturating_add(wait.ceil_micros().max(Micros::saturating(1)));
                if decision.writes_refused {
                    // A state carried to new parameters: the wait is at the new rate, from
                    // it, so the next step reads it so.
                    std::mem::swap(value, spare);
                    in_value = true;
                }
                continue;
            }
            decision = decide_string(
                limiter,
                state,
                at,
                &Request::take(fits),
                false,
                scratch,
                spare,
            )?;
            left -= fits;
        } else {
            left -= part;
        }
        std::mem::swap(value, spare);
        in_value = true;
        charged = Some(decision);
        if left == 0 {
            break;
        }
    }
    let Some(last) = charged.filter(|_| left == 0) else {
        return Err(StateError::Foreign); // Not reached for a checked quantity.
    };
    let later = (at - now).ticks();
    Ok(StringDecision {
        verdict: Verdict {
            limited: false,
            remaining: if at > now { 0 } else { last.verdict.remaining },
            retry_after: RetryAfter::NONE,
            reset_after: last.verdict.reset_after + later,
            ..last.verdict
        },
        ..last
    })
}

/// A stored `CL.THROTTLE` state as `gcra` reads it at `now`: carried over to its
/// parameters when written under others ([`Gcra::carried`]), and whether it was (then a
/// refusal stores it so).
#[inline(always)]
fn read_gcra(gcra: &Gcra, state: &[u8], now: Micros) -> Result<GcraRead, StateError> {
    let (stored, written) = decode_gcra_state(state).ok_or(StateError::Foreign)?;
    let read = |state: GcraState| GcraRead {
        state,
        carried: state != stored,
        basis: None,
    };
    Ok(match written {
        Written::Rate(basis) if gcra.writes(basis) => GcraRead {
            state: stored,
            carried: false,
            basis: Some(basis),
        },
        Written::Rate(basis) => {
            read(gcra.carried(stored, Some(basis), now.not_before_epoch().ticks()))
        }
        Written::Share(basis) => read(gcra.carried_share(stored, basis)),
        Written::Unknown => read(stored),
    })
}

/// A stored `CL.THROTTLE` state as a call reads it ([`read_gcra`]).
#[derive(Clone, Copy)]
struct GcraRead {
    /// The state, carried to the call's parameters.
    state: GcraState,
    /// Whether it was carried (then a refusal stores it so).
    carried: bool,
    /// The basis it was written under, when it is the call's (what a write keeps).
    basis: Option<Basis>,
}

/// [`force_string`] for a GCRA that warms up: the whole quantity charged at once at its
/// cold cost ([`Gcra::force_warming`]), from the end of a block in force if there is one (as
/// the parts of any other forced take are placed after it).
fn force_warming(
    gcra: &Gcra,
    stored: Option<&[u8]>,
    now: Micros,
    quantity: u64,
    value: &mut Vec<u8>,
) -> Result<StringDecision, StateError> {
    let (blocked_until, own_state) = stored.map_or((Micros::ZERO, None), split_blocked);
    let at = block::in_force(blocked_until, now)
        .unwrap_or(now)
        .not_before_epoch();
    let state = own_state
        .map(|state| read_gcra(gcra, state, at).map(|read| read.state))
        .transpose()?;
    let outcome = gcra.force_warming(state, at.ticks(), quantity);
    let new_state = outcome.new_state.ok_or(StateError::Foreign)?;
    value.clear();
    value.extend_from_slice(&encode_warm_gcra(new_state, gcra.basis()));
    Ok(StringDecision {
        verdict: Verdict {
            remaining: if at > now {
                0
            } else {
                outcome.verdict.remaining
            },
            reset_after: outcome.verdict.reset_after + (at - now).ticks(),
            ..outcome.verdict
        },
        write: StringWrite::Store {
            expire_at: gcra.state_end(new_state).ceil_millis(),
            placement: Placement::WHOLE,
        },
        writes_refused: false,
    })
}

/// A take at `now` behind requests scheduled until `queue_end`: refused, waiting for them
/// and then for room as the limiter will stand at `queue_end`.
#[cold]
fn queued(
    limiter: &Limiter,
    own_state: Option<&[u8]>,
    now: Micros,
    queue_end: Micros,
    request: &Request,
    scratch: &mut Scratch,
    value: &mut Vec<u8>,
) -> Result<Own, StateError> {
    let ahead = (queue_end - now).ticks();
    let then = decide_own(
        limiter, own_state, queue_end, request, false, scratch, value,
    )?
    .verdict;
    let peek = Request::take(0);
    let standing = decide_own(limiter, own_state, queue_end, &peek, false, scratch, value)?.verdict;
    value.clear();
    let never_fits = then.limited && then.retry_after.is_none();
    Ok(Own {
        verdict: Verdict {
            limited: true,
            remaining: 0,
            retry_after: if never_fits {
                RetryAfter::NONE
            } else {
                RetryAfter::of(then.retry_after.or(Ticks::ZERO) + ahead)
            },
            reset_after: standing.reset_after + ahead,
            ..then
        },
        changes: false,
        carried: false,
        expire_at: None,
        placement: Placement::WHOLE,
    })
}

/// Whether `request` is a take the algorithm would admit on a key blocked at `now`: the
/// block alone refuses it, so its reply is the standing without it.
fn blocked_take(request: &Request, blocked_until: Micros, now: Micros, own: &Verdict) -> bool {
    request.action == Action::Take
        && !own.limited
        && request.quantity > 0
        && block::in_force(blocked_until, now).is_some()
}

/// The algorithm's own decision on its own state, appending its new state to `value` (only
/// the bytes that change, when `patch` allows and the algorithm can).
#[inline(always)]
fn decide_own(
    limiter: &Limiter,
    stored: Option<&[u8]>,
    now: Micros,
    request: &Request,
    patch: bool,
    scratch: &mut Scratch,
    value: &mut Vec<u8>,
) -> Result<Own, StateError> {
    let quantity = request.quantity;
    match (limiter, request.action) {
        (Limiter::Throttle(gcra), action) => {
            let at = now.not_before_epoch();
            // A match rather than `map`: the read is then inlined into the decision (a
            // closure was called out of line, at about 60 instructions a read). A missing
            // state is decided as the state it stands for from the epoch on, so that every
            // byte the inlined decision compares is defined: an `Option`'s `None` leaves its
            // payload undefined, and a comparison of it, thrown away, is still what memcheck
            // reports (see [`crate::core::verdict::RetryAfter`]).
            let read = match stored {
                Some(state) => read_gcra(gcra, state, at)?,
                None => GcraRead {
                    state: gcra.missing_state(),
                    carried: false,
                    basis: None,
                },
            };
            let now = at.ticks();
            let outcome = match action {
                Action::Take => gcra.apply(Some(read.state), now, quantity),
                Action::Refund => gcra.refund(Some(read.state), now, quantity),
            };
            // A take refused on a state carried to new parameters stores it carried: from
            // now on it drains at the new rate, as the refusal's wait says. A quantity that
            // can never fit changes nothing, as ever.
            let carried = read.carried
                && outcome.new_state.is_none()
                && action == Action::Take
                && quantity > 0
                && quantity <= gcra.limit() as u64;
            let written = outcome.new_state.or(carried.then_some(read.state));
            if let Some(state) = written {
                // The basis read, when it is this call's: computing it costs more.
                let basis = read.basis.unwrap_or_else(|| gcra.basis());
                if gcra.warms_up() {
                    value.extend_from_slice(&encode_warm_gcra(state, basis));
                } else {
                    value.extend_from_slice(&encode_gcra(state.tat, basis));
                }
            }
            Ok(Own {
                verdict: outcome.verdict,
                changes: outcome.new_state.is_some(),
                carried,
                expire_at: written
                    .map(|state| gcra.state_end(state))
                    .filter(|&end| end > now)
                    .map(|end| end.ceil_millis()),
                placement: Placement::WHOLE,
            })
        }
        (Limiter::Window(window), Action::Take) => {
            let outcome = window.apply(stored, now, quantity, patch, scratch, value)?;
            Ok(Own {
                verdict: outcome.verdict,
                changes: outcome.expire_at.is_some(),
                carried: false,
                expire_at: outcome.expire_at,
                placement: outcome.placement,
            })
        }
        (Limiter::Window(window), Action::Refund) => {
            let refund = window.refund(stored, now, quantity, patch, scratch, value)?;
            Ok(Own {
                verdict: refund.verdict,
                changes: refund.changed,
                carried: false,
                expire_at: refund.expire_at,
                placement: refund.placement,
            })
        }
        (Limiter::Log(_) | Limiter::Lease(_) | Limiter::Load(_), _) => Err(StateError::Foreign),
    }
}

/// What to do with a log after a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogWrite {
    /// Nothing.
    Nothing,
    /// Log the request.
    Take,
    /// Give back the request's quantity.
    Refund,
    /// Block the key until this instant.
    StartBlock(Micros),
    /// Log the request whatever it takes (`FORCE`, [`force_log`]).
    Force,
}

/// Decides `request` at `now` for a log (`None` for a missing key), changing nothing. For a
/// refund, the verdict is the standing before it: applying the change
/// ([`super::effect::LogEffect::apply`]) gives the one after.
#[inline(always)]
pub fn decide_log(
    limiter: &LogLimiter,
    log: Option<&SlidingLog>,
    now: Micros,
    request: &Request,
) -> (Verdict, LogWrite) {
    let blocked_until = log.map_or(Micros::ZERO, SlidingLog::blocked_until);
    let live = limiter.survey(log, now);
    let (quantity, changes) = match request.action {
        Action::Take => (request.quantity, request.may_write(limiter.limit())),
        Action::Refund => (0, request.quantity > 0 && live.used > 0),
    };
    // Requests scheduled ahead of a take (`DELAY`, `FORCE`) are logged at their time.
    let queue_end = log.map_or(Micros::ZERO, SlidingLog::newest);
    let mut verdict = if request.action == Action::Take && queue_end > now {
        queued_log(limiter, log, now, queue_end, quantity)
    } else {
        limiter.inspect_surveyed(log, &live, now, quantity)
    };
    if !verdict.limited && request.action == Action::Take && !limiter.has_room_for(log, quantity) {
        // A log full of scheduled requests takes no more.
        verdict.limited = true;
        verdict.retry_after = RetryAfter::NONE;
    }
    if blocked_take(request, blocked_until, now, &verdict) {
        verdict = limiter.inspect_surveyed(log, &live, now, 0);
    }
    let changes = changes && !(request.action == Action::Take && verdict.limited);
    let decision = block::decide(request, blocked_until, now, verdict, changes);
    let write = match (decision.write, request.action) {
        (Write::Nothing, _) => LogWrite::Nothing,
        (Write::State, Action::Take) => LogWrite::Take,
        (Write::State, Action::Refund) => LogWrite::Refund,
        (Write::StartBlock(until), _) => LogWrite::StartBlock(until),
    };
    (decision.verdict, write)
}

/// Logs a `FORCE` take of `quantity` at `now` on `log` (a copy, when deciding; the key's
/// log, when committing): what fits now, the rest at the earliest times it fits. Returns
/// the reply: admitted, and nothing remaining while anything waits to count.
pub fn force_log(
    limiter: &LogLimiter,
    log: &mut SlidingLog,
    now: Micros,
    quantity: u64,
) -> Verdict {
    let last = limiter.force(log, now, quantity);
    let standing = limiter.inspect_surveyed(Some(log), &limiter.survey(Some(log), now), now, 0);
    Verdict {
        limited: false,
        remaining: if last > now { 0 } else { standing.remaining },
        retry_after: RetryAfter::NONE,
        ..standing
    }
}

/// [`queued`] for a log: a take at `now` behind requests logged until `queue_end`.
#[cold]
fn queued_log(
    limiter: &LogLimiter,
    log: Option<&SlidingLog>,
    now: Micros,
    queue_end: Micros,
    quantity: u64,
) -> Verdict {
    let ahead = (queue_end - now).ticks();
    let live = limiter.survey(log, queue_end);
    let then = limiter.inspect_surveyed(log, &live, queue_end, quantity);
    let standing = limiter.inspect_surveyed(log, &live, queue_end, 0);
    let never_fits = then.limited && then.retry_after.is_none();
    Verdict {
        limited: true,
        remaining: 0,
        retry_after: if never_fits {
            RetryAfter::NONE
        } else {
            RetryAfter::of(then.retry_after.or(Ticks::ZERO) + ahead)
        },
        reset_after: standing.reset_after + ahead,
        ..then
    }
}

#[cfg(test)]
mod tests;
