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
    decode_gcra, encode_gcra, is_gcra_length, is_state_length, push_blocked_header, split_blocked,
    Placement,
};
use super::gcra::Gcra;
use super::log::{Live, LogLimiter, SlidingLog};
use super::request::{Action, Request};
use super::time::{Micros, Millis};
use super::verdict::Verdict;
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
}

impl Limiter {
    /// The largest quantity it ever admits at once.
    pub fn limit(&self) -> u64 {
        match self {
            Limiter::Throttle(gcra) => gcra.limit() as u64,
            Limiter::Window(window) => window.limit(),
            Limiter::Log(log) => log.limit(),
        }
    }

    /// Whether a string of `len` bytes may hold this limiter's state, blocked or not;
    /// false for a limiter whose state is not a string.
    pub fn accepts_length(&self, len: usize) -> bool {
        match self {
            Limiter::Throttle(_) => is_state_length(is_gcra_length, len),
            Limiter::Window(_) => is_state_length(is_window_length, len),
            Limiter::Log(_) => false,
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
    /// Whether what it stores is a block this refusal starts.
    pub starts_block: bool,
}

/// What an algorithm alone decided on a string state.
struct Own {
    verdict: Verdict,
    /// Whether its state changes (the new state was appended to the buffer).
    changes: bool,
    /// When the new state stops mattering, or `None` when nothing counts.
    expire_at: Option<Millis>,
    /// Where its bytes go.
    placement: Placement,
}

/// Decides `request` at `now` for a limiter whose state is a string, given the key's value
/// (`None` for a missing key). What to store is appended to `value` (cleared first).
/// `StateError` when the value is not this limiter's state; a `Log` limiter has no string
/// state and always gets `Foreign`.
#[inline(always)]
pub fn decide_string(
    limiter: &Limiter,
    stored: Option<&[u8]>,
    now: Micros,
    request: &Request,
    scratch: &mut Scratch,
    value: &mut Vec<u8>,
) -> Result<StringDecision, StateError> {
    let (blocked_until, own_state) = stored.map_or((Micros(0), None), split_blocked);
    // Only a value that is the algorithm's state alone can be patched in place.
    let patch = own_state.is_some() && own_state.map(<[u8]>::len) == stored.map(<[u8]>::len);
    value.clear();
    // A refund during a block stores its state behind the block's header.
    let kept_block =
        block::in_force(blocked_until, now).filter(|_| request.action == Action::Refund);
    if let Some(until) = kept_block {
        push_blocked_header(until, value);
    }
    let mut own = decide_own(limiter, own_state, now, request, patch, scratch, value)?;
    if blocked_take(request, blocked_until, now, &own.verdict) {
        // Refused by the block alone: the standing is the uncharged one.
        let peek = Request::take(0);
        own.verdict = decide_own(limiter, own_state, now, &peek, patch, scratch, value)?.verdict;
    }
    let decision = block::decide(request, blocked_until, now, own.verdict, own.changes);
    let write = match decision.write {
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
            value.clear();
            push_blocked_header(until, value);
            value.extend_from_slice(own_state.unwrap_or_default());
            let own_end = (now.ticks() + own.verdict.reset_after).ceil_millis();
            StringWrite::Store {
                expire_at: own_end.max(until.ceil_millis()),
                placement: Placement::WHOLE,
            }
        }
    };
    Ok(StringDecision {
        verdict: decision.verdict,
        write,
        starts_block: matches!(decision.write, Write::StartBlock(_)),
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
            let stored_tat = stored
                .map(|state| decode_gcra(state).ok_or(StateError::Foreign))
                .transpose()?;
            let now = now.not_before_epoch().ticks();
            let outcome = match action {
                Action::Take => gcra.apply(stored_tat, now, quantity),
                Action::Refund => gcra.refund(stored_tat, now, quantity),
            };
            if let Some(tat) = outcome.new_tat {
                value.extend_from_slice(&encode_gcra(tat));
            }
            Ok(Own {
                verdict: outcome.verdict,
                changes: outcome.new_tat.is_some(),
                expire_at: outcome
                    .new_tat
                    .filter(|&tat| tat > now)
                    .map(|tat| tat.ceil_millis()),
                placement: Placement::WHOLE,
            })
        }
        (Limiter::Window(window), Action::Take) => {
            let outcome = window.apply(stored, now, quantity, patch, scratch, value)?;
            Ok(Own {
                verdict: outcome.verdict,
                changes: outcome.expire_at.is_some(),
                expire_at: outcome.expire_at,
                placement: outcome.placement,
            })
        }
        (Limiter::Window(window), Action::Refund) => {
            let refund = window.refund(stored, now, quantity, patch, scratch, value)?;
            Ok(Own {
                verdict: refund.verdict,
                changes: refund.changed,
                expire_at: refund.expire_at,
                placement: refund.placement,
            })
        }
        (Limiter::Log(_), _) => Err(StateError::Foreign),
    }
}

/// What to do with a log after a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogWrite {
    /// Nothing.
    Nothing,
    /// Log the request ([`commit_log`]), given what the log held when decided.
    Take(Live),
    /// Give back the request's quantity ([`commit_log`]).
    Refund,
    /// Block the key until this instant.
    StartBlock(Micros),
}

/// Decides `request` at `now` for a log (`None` for a missing key), changing nothing. For a
/// refund, the verdict is the standing before it: [`commit_log`] gives the one after.
#[inline(always)]
pub fn decide_log(
    limiter: &LogLimiter,
    log: Option<&SlidingLog>,
    now: Micros,
    request: &Request,
) -> (Verdict, LogWrite) {
    let blocked_until = log.map_or(Micros(0), SlidingLog::blocked_until);
    let live = limiter.survey(log, now);
    let (quantity, changes) = match request.action {
        Action::Take => (request.quantity, request.may_write(limiter.limit())),
        Action::Refund => (0, request.quantity > 0 && live.used > 0),
    };
    let mut verdict = limiter.inspect_surveyed(log, &live, now, quantity);
    if blocked_take(request, blocked_until, now, &verdict) {
        verdict = limiter.inspect_surveyed(log, &live, now, 0);
    }
    let changes = changes && !(request.action == Action::Take && verdict.limited);
    let decision = block::decide(request, blocked_until, now, verdict, changes);
    let write = match (decision.write, request.action) {
        (Write::Nothing, _) => LogWrite::Nothing,
        (Write::State, Action::Take) => LogWrite::Take(live),
        (Write::State, Action::Refund) => LogWrite::Refund,
        (Write::StartBlock(until), _) => LogWrite::StartBlock(until),
    };
    (decision.verdict, write)
}

/// Carries out `write`, decided by [`decide_log`] for the same request at the same `now`,
/// and makes `verdict` (the decision's) the reply after it: a refund's is the standing after.
/// Returns when the key should expire, or `None` when it should go (a refund left nothing
/// counted, and no block is in force).
#[inline(always)]
pub fn commit_log(
    limiter: &LogLimiter,
    log: &mut SlidingLog,
    now: Micros,
    request: &Request,
    write: LogWrite,
    verdict: &mut Verdict,
) -> Option<Millis> {
    // The block in force, read once: only `StartBlock` changes it.
    let mut block = block::in_force(log.blocked_until(), now);
    match write {
        LogWrite::Nothing => {}
        LogWrite::Take(live) => {
            if block.is_none() {
                log.set_blocked_until(Micros(0));
            }
            limiter.log_surveyed(log, live, now, request.quantity);
        }
        LogWrite::Refund => {
            let (after, _) = limiter.refund(log, now, request.quantity);
            *verdict = match block {
                Some(until) => block::blocked_verdict(after, until, now),
                None => after,
            };
        }
        LogWrite::StartBlock(until) => {
            log.set_blocked_until(until);
            block = block::in_force(until, now);
        }
    }
    let block_end = block.map(Micros::ceil_millis);
    // A take just logged counts: no need to look.
    let spent = !matches!(write, LogWrite::Take(_)) && limiter.is_spent(log, now);
    let own_end = (!spent).then(|| limiter.expire_at(log));
    own_end.max(block_end)
}

#[cfg(test)]
mod tests;
