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
use super::packed::Packed;
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
    /// `None`). When the change says it changed something, `effect` writes its fields (for
    /// replicas and the AOF) and names the internal command that carries them; it runs
    /// only when something may receive it.
    fn change_native<T: Native + Default, R>(
        &mut self,
        create: bool,
        change: impl FnOnce(&mut T) -> NativeChange<R>,
        effect: impl FnOnce(&R, &mut Packed) -> &'static CStr,
    ) -> Result<Option<R>, Self::Error>;
}

/// What a change to a native value did.
pub struct NativeChange<R> {
    /// What the caller gets back.
    pub reply: R,
    /// Whether anything changed (when nothing did, nothing is stored, signalled or
    /// propagated).
    pub changed: bool,
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

impl Decision {
    /// Nothing decided yet.
    const NOTHING: Decision = Decision {
        plan: Plan::String(StringWrite::Nothing),
        starts_block: false,
    };
}

/// What one limiter will store if the call commits.
#[derive(Clone, Copy, Debug)]
enum Plan {
    String(StringWrite),
    Log(LogLimiter, LogWrite),
}

/// What one limiter decided to store, having changed nothing (its reply is kept apart).
#[derive(Clone, Copy, Debug)]
struct Decision {
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
    // At most N: a bound the compiler sees, so that a call of one limiter runs no loop.
    let count = call.limiters.len().min(N);
    debug_assert!((1..=N.min(MAX_LIMITERS)).contains(&count) && verdicts.len() == count);
    let mut keys: [Option<S::Key<'_>>; N] = [const { None }; N];
    let mut decisions = [Decision::NOTHING; N];
    for index in 0..count {
        let limiter = &call.limiters[index];
        let write = call.write && call.request.may_write(limiter.limit());
        let key = keys[index].insert(store.open(index, write)?);
        let buffer = &mut buffers[index];
        decisions[index] = decide(call, limiter, key, buffer, scratch, &mut verdicts[index])?;
    }
    let settlement = Settlement::of(
        &call.request,
        verdicts
            .iter()
            .zip(call.limiters)
            .map(|(verdict, limiter)| (*verdict, limiter.limit())),
    );
    for index in 0..count {
        let (Some(key), decision) = (&mut keys[index], &decisions[index]) else {
            continue;
        };
        let verdict = &mut verdicts[index];
        match settlement.conclusion(call.write, decision.starts_block, verdict) {
            Conclusion::Commit => commit(call, key, decision, &buffers[index], verdict)?,
            Conclusion::Standing => {
                *verdict = standing(call, &call.limiters[index], key, peek, scratch)?;
            }
            Conclusion::AsDecided => {}
        }
    }
    Ok(())
}

/// Decides `limiter` on its open `key`, changing nothing: its reply goes to `verdict`, a
/// new string state to `buffer`.
#[inline(always)]
fn decide<K: Key>(
    call: &Call,
    limiter: &Limiter,
    key: &K,
    buffer: &mut Vec<u8>,
    scratch: &mut Scratch,
    verdict: &mut Verdict,
) -> Result<Decision, K::Error> {
    Ok(match limiter {
        Limiter::Log(log_limiter) => {
            let log = key.native::<SlidingLog>()?;
            let write;
            (*verdict, write) = decide_log(log_limiter, log.as_deref(), call.now, &call.request);
            Decision {
                plan: Plan::Log(*log_limiter, write),
                starts_block: matches!(write, LogWrite::StartBlock(_)),
            }
        }
        limiter => {
            let stored = key.string(|len| limiter.accepts_length(len))?;
            let decision =
                decide_string(limiter, stored, call.now, &call.request, scratch, buffer)?;
            *verdict = decision.verdict;
            Decision {
                plan: Plan::String(decision.write),
                starts_block: decision.starts_block,
            }
        }
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

/// Stores what a limiter decided on its open key (`value`: the new string state), and
/// brings its reply, `verdict`, to the state after.
#[inline(always)]
fn commit<K: Key>(
    call: &Call,
    key: &mut K,
    decision: &Decision,
    value: &[u8],
    verdict: &mut Verdict,
) -> Result<(), K::Error> {
    match decision.plan {
        Plan::String(StringWrite::Nothing) | Plan::Log(_, LogWrite::Nothing) => {}
        Plan::String(StringWrite::Store {
            expire_at,
            placement,
        }) => key.put_string(value, placement, expire_at)?,
        Plan::String(StringWrite::Delete) => key.delete()?,
        Plan::Log(log_limiter, write) => {
            let (request, now) = (&call.request, call.now);
            key.change_native(
                true,
                |log: &mut SlidingLog| {
                    let expire_at = commit_log(&log_limiter, log, now, request, write, verdict);
                    NativeChange {
                        reply: (),
                        changed: true,
                        after: After::expiring(expire_at),
                    }
                },
                |(), packed| log_effect(&log_limiter, request, now, packed),
            )?;
        }
    }
    Ok(())
}

/// What a log's change propagates: the call again, with its time, so that replicas and the
/// AOF reach the same log and expiry (a few integers, whatever the log's length):
/// `RL.LOG.REPLAY key limit,window_us,quantity,now_us[,REFUND|,BLOCK,us]`.
pub fn log_effect(
    limiter: &LogLimiter,
    request: &Request,
    now: Micros,
    packed: &mut Packed,
) -> &'static CStr {
    packed
        .int(limiter.limit() as i64)
        .int(limiter.window().0)
        .int(request.quantity as i64)
        .int(now.0);
    match (request.action, request.block) {
        (Action::Refund, _) => {
            packed.word("REFUND");
        }
        (Action::Take, Some(block)) => {
            packed.word("BLOCK").int(block.0);
        }
        (Action::Take, None) => {}
    }
    LOG_REPLAY
}

#[cfg(test)]
pub mod memory;

#[cfg(test)]
mod tests;
