//! The one engine behind every limiter command: a call names one limiter (`CL.THROTTLE`,
//! `RL.WINDOW`, `RL.LOG`) or several (`RL.ALL`), each on its own key, and asks them one
//! [`Request`]. [`run`]
//!
//! 1. opens every key and decides every limiter, writing nothing (a bad key anywhere, a
//!    `WRONGTYPE`, stops the call before any write);
//! 2. settles the call ([`Settlement`]): a take is admitted only if every limiter admits
//!    it; a refund always is;
//! 3. stores what the settled call changes (every limiter's new state when admitted, only
//!    the blocks a refusal starts otherwise, nothing for a read-only call), each write
//!    carrying its effect for replicas and the AOF.
//!
//! Where the keys live is the [`Store`]'s business: Redis keys in the server
//! (`crate::redis::store`), a map in the tests ([`memory`]).

use std::ffi::CStr;
use std::ops::Deref;

use super::codec::Placement;
use super::limiter::{commit_log, decide_log, decide_string, Limiter, LogWrite, StringWrite};
use super::log::{LogLimiter, SlidingLog};
use super::packed::{Effect, Field};
use super::request::{Action, Request};
use super::ring::Native;
use super::settle::{Conclusion, Settlement};
use super::time::{Micros, Millis};
use super::verdict::Verdict;
use super::windows::{Scratch, StateError};

/// The most limiters one call names.
pub const MAX_LIMITERS: usize = 16;

/// The command a log's change propagates: the call again, with the master's clock reading.
pub const LOG_REPLAY: &CStr = c"RL.LOG.REPLAY";

/// Where a call's limiters keep their state: a key per limiter, in the call's order.
pub trait Store {
    /// Why opening, reading or writing a key fails; a key that holds something else than
    /// the limiter's state is one of them.
    type Error: From<StateError>;
    /// An open key.
    type Key<'s>: Key<Error = Self::Error>
    where
        Self: 's;

    /// Opens the key of limiter `index`: for writing when `write`.
    fn open(&self, index: usize, write: bool) -> Result<Self::Key<'_>, Self::Error>;
}

/// One open key: its state read, and a write that also reaches replicas and the AOF.
pub trait Key {
    /// As [`Store::Error`].
    type Error: From<StateError>;
    /// A native value read in place.
    type View<'k, T: Native + 'k>: Deref<Target = T>
    where
        Self: 'k;

    /// The key's string: `None` when the key does not exist, its bytes when it is a string
    /// whose length `accepts` takes, `WRONGTYPE` for anything else (the length is checked
    /// before the bytes are read).
    fn string(&self, accepts: impl Fn(usize) -> bool) -> Result<Option<&[u8]>, Self::Error>;

    /// The key's native value of kind `T`: `None` when the key does not exist, `WRONGTYPE`
    /// for anything else.
    fn native<T: Native>(&self) -> Result<Option<Self::View<'_, T>>, Self::Error>;

    /// Stores a string state (the bytes from `placement.at` on, over the value the decision
    /// read), expiring at `expire_at`.
    fn put_string(
        &mut self,
        value: &[u8],
        placement: Placement,
        expire_at: Millis,
    ) -> Result<(), Self::Error>;

    /// Deletes the key.
    fn delete(&mut self) -> Result<(), Self::Error>;

    /// Changes the key's native value of kind `T` in place (a new, empty one when the key
    /// does not exist and `create` says so; else `change` does not run and the reply is
    /// `None`).
    fn change_native<T: Native + Default, R>(
        &mut self,
        create: bool,
        change: impl FnOnce(&mut T) -> NativeChange<R>,
    ) -> Result<Option<R>, Self::Error>;
}

/// What a change to a native value did.
pub struct NativeChange<R> {
    /// What the caller gets back.
    pub reply: R,
    /// What changed, for replicas and the AOF; `None` when nothing did (then nothing is
    /// stored, signalled or propagated).
    pub effect: Option<Effect>,
    /// What becomes of the key.
    pub after: After,
}

/// What becomes of a key after a change to its native value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    /// It expires then.
    ExpiresAt(Millis),
    /// It keeps the expiry it has (none for a key just made).
    KeepsItsExpiry,
    /// It goes: nothing in it counts any more.
    Goes,
}

impl After {
    /// A key that expires at `expire_at`, or goes when `None`.
    pub fn expiring(expire_at: Option<Millis>) -> After {
        expire_at.map_or(After::Goes, After::ExpiresAt)
    }
}

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

/// What one limiter will store if the call commits.
#[derive(Clone, Copy, Debug)]
enum Plan {
    String(StringWrite),
    Log(LogLimiter, LogWrite),
}

/// One limiter of a running call, decided.
struct Slot<K> {
    key: K,
    verdict: Verdict,
    plan: Plan,
    /// Whether the plan is a block this refusal starts.
    starts_block: bool,
}

/// Runs `call` on `store`, writing each limiter's reply to `verdicts` (in the limiters'
/// order), as described in the module's documentation. `N`, at least the number of
/// limiters, sizes the call's working state: a command of one limiter pays for one.
pub fn run<S: Store, const N: usize>(
    store: &S,
    call: &Call,
    working: &mut Working,
    verdicts: &mut [Verdict],
) -> Result<(), S::Error> {
    let Working {
        buffers,
        peek,
        scratch,
    } = working;
    let count = call.limiters.len();
    debug_assert!((1..=N.min(MAX_LIMITERS)).contains(&count) && verdicts.len() == count);
    let mut slots: [Option<Slot<S::Key<'_>>>; N] = [const { None }; N];
    let slots = &mut slots[..count];
    for (index, ((limiter, slot), buffer)) in call
        .limiters
        .iter()
        .zip(slots.iter_mut())
        .zip(buffers.iter_mut())
        .enumerate()
    {
        let write = call.write && call.request.may_write(limiter.limit());
        let key = store.open(index, write)?;
        *slot = Some(decide(call, limiter, key, buffer, scratch)?);
    }
    let settlement = Settlement::of(
        &call.request,
        slots
            .iter()
            .flatten()
            .zip(call.limiters)
            .map(|(slot, limiter)| (slot.verdict, limiter.limit())),
    );
    for (((slot, limiter), buffer), verdict) in slots
        .iter_mut()
        .flatten()
        .zip(call.limiters)
        .zip(buffers.iter())
        .zip(verdicts.iter_mut())
    {
        *verdict = match settlement.conclusion(call.write, slot.starts_block, &slot.verdict) {
            Conclusion::Commit => commit(call, slot, buffer)?,
            Conclusion::Standing => standing(call, limiter, &slot.key, peek, scratch)?,
            Conclusion::AsDecided => slot.verdict,
        };
    }
    Ok(())
}

/// Decides `limiter` on its open `key`, changing nothing; a new string state goes to
/// `buffer`.
#[inline(always)]
fn decide<K: Key>(
    call: &Call,
    limiter: &Limiter,
    key: K,
    buffer: &mut Vec<u8>,
    scratch: &mut Scratch,
) -> Result<Slot<K>, K::Error> {
    let (verdict, plan, starts_block) = match limiter {
        Limiter::Log(log_limiter) => {
            let log = key.native::<SlidingLog>()?;
            let (verdict, write) = decide_log(log_limiter, log.as_deref(), call.now, &call.request);
            let starts_block = matches!(write, LogWrite::StartBlock(_));
            (verdict, Plan::Log(*log_limiter, write), starts_block)
        }
        limiter => {
            let stored = key.string(|len| limiter.accepts_length(len))?;
            let decision =
                decide_string(limiter, stored, call.now, &call.request, scratch, buffer)?;
            (
                decision.verdict,
                Plan::String(decision.write),
                decision.starts_block,
            )
        }
    };
    Ok(Slot {
        key,
        verdict,
        plan,
        starts_block,
    })
}

/// `limiter`'s standing on its open `key`, uncharged, as a peek sees it.
fn standing<K: Key>(
    call: &Call,
    limiter: &Limiter,
    key: &K,
    peek: &mut Vec<u8>,
    scratch: &mut Scratch,
) -> Result<Verdict, K::Error> {
    let look = Request::take(0);
    Ok(match limiter {
        Limiter::Log(log_limiter) => {
            let log = key.native::<SlidingLog>()?;
            decide_log(log_limiter, log.as_deref(), call.now, &look).0
        }
        limiter => {
            let stored = key.string(|len| limiter.accepts_length(len))?;
            decide_string(limiter, stored, call.now, &look, scratch, peek)?.verdict
        }
    })
}

/// Stores what a limiter decided on its open key (`value`: the new string state); returns
/// the reply after.
#[inline(always)]
fn commit<K: Key>(call: &Call, slot: &mut Slot<K>, value: &[u8]) -> Result<Verdict, K::Error> {
    let mut verdict = slot.verdict;
    match slot.plan {
        Plan::String(StringWrite::Nothing) | Plan::Log(_, LogWrite::Nothing) => {}
        Plan::String(StringWrite::Store {
            expire_at,
            placement,
        }) => slot.key.put_string(value, placement, expire_at)?,
        Plan::String(StringWrite::Delete) => slot.key.delete()?,
        Plan::Log(log_limiter, write) => {
            let effect = log_effect(&log_limiter, &call.request, call.now);
            slot.key.change_native(true, |log: &mut SlidingLog| {
                let expire_at = commit_log(
                    &log_limiter,
                    log,
                    call.now,
                    &call.request,
                    write,
                    &mut verdict,
                );
                NativeChange {
                    reply: (),
                    effect: Some(effect),
                    after: After::expiring(expire_at),
                }
            })?;
        }
    }
    Ok(verdict)
}

/// What a log's change propagates: the call again, with its time, so that replicas and the
/// AOF reach the same log and expiry (a few integers, whatever the log's length):
/// `RL.LOG.REPLAY key limit,window_us,quantity,now_us[,REFUND|,BLOCK,us]`.
pub fn log_effect(limiter: &LogLimiter, request: &Request, now: Micros) -> Effect {
    let (limit, window) = (limiter.limit() as i64, limiter.window().0);
    let (quantity, now) = (request.quantity as i64, now.0);
    let call = [
        Field::Int(limit),
        Field::Int(window),
        Field::Int(quantity),
        Field::Int(now),
    ];
    match (request.action, request.block) {
        (Action::Refund, _) => {
            let [a, b, c, d] = call;
            Effect::new(LOG_REPLAY, &[a, b, c, d, Field::Word("REFUND")])
        }
        (Action::Take, Some(block)) => {
            let [a, b, c, d] = call;
            let block = Field::Int(block.0);
            Effect::new(LOG_REPLAY, &[a, b, c, d, Field::Word("BLOCK"), block])
        }
        (Action::Take, None) => Effect::new(LOG_REPLAY, &call),
    }
}

#[cfg(test)]
pub mod memory;

#[cfg(test)]
mod tests;
