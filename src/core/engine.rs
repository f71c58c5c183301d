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

use std::ops::Deref;

use super::codec::Placement;
use super::effect::{
    Effect, LeaseApplied, LeaseChange, LeaseEffect, LogApplied, LogChange, LogEffect,
};
use super::lease::{self, LeaseLimiter, LeaseSet};
use super::limiter::{
    decide_log, decide_string, force_log, force_string, Limiter, LogWrite, StringWrite,
};
use super::log::{LogLimiter, SlidingLog};
use super::request::{Action, Request, Shortfall};
use super::ring::Native;
use super::settle::{Conclusion, Settlement};
use super::time::{Micros, Millis, Ticks};
use super::verdict::{RetryAfter, Verdict};
use super::windows::{Scratch, StateError};

/// The most limiters one call names.
pub const MAX_LIMITERS: usize = 16;

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
    /// `None`). When the change says it changed something, `effect` gives what replicas and
    /// the AOF receive; it runs only when something may receive it.
    fn change_native<'e, T: Native + Default, R>(
        &mut self,
        create: bool,
        change: impl FnOnce(&mut T) -> NativeChange<R>,
        effect: impl FnOnce(&R) -> Effect<'e>,
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
    /// A log's change, for the request as the call settled it (a delayed request at its
    /// time, a partial one for what was granted).
    Log(LogLimiter, LogWrite),
    /// A lease to take, if admitted: the id the set gives next ([`lease::next_id`]).
    Lease(LeaseLimiter, Option<u64>),
}

/// What one limiter decided to store, having changed nothing (its reply is kept apart).
#[derive(Clone, Copy, Debug)]
struct Decision {
    plan: Plan,
    /// Whether the plan is a block this refusal starts.
    starts_block: bool,
}

/// What a settled call did, besides each limiter's reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// How long the caller waits before going ahead (`DELAY`); 0: at once, or refused.
    pub wait: Micros,
    /// The quantity admitted: all of it, what fit (`AT_MOST`), or 0 when refused.
    pub granted: u64,
    /// Whether some limiter was charged beyond what fit now (`FORCE`).
    pub owed: bool,
    /// The id of the lease an admitted call took (one id for every `LEASE` limiter).
    pub lease_id: Option<u64>,
}

/// How many times a delayed call looks for the time every limiter admits it. Each limiter
/// fits from the time it names on, so the first look finds it; the others are a margin.
const DELAY_ROUNDS: usize = 4;

/// Runs `call` on `store`, writing each limiter's reply to `verdicts` (in the limiters'
/// order), as described in the module's documentation. `N`, at least the number of
/// limiters, sizes the call's working state: a command of one limiter pays for one.
///
/// A take that does not fit now settles by its [`Shortfall`], a rule for every limiter:
/// refused; delayed to the earliest time every limiter admits it, when that is soon
/// enough; cut to what fits now; or forced, each limiter charging the rest when it fits.
pub fn run<S: Store, const N: usize>(
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
        let write = call.write && call.request.may_write(limiter.limit());
        let key = keys[index].insert(store.open(index, write)?);
        let buffer = &mut buffers[index];
        decisions[index] = decide(
            limiter,
            key,
            call.now,
            &call.request,
            buffer,
            scratch,
            &mut verdicts[index],
        )?;
    }
    let mut request = call.request;
    let mut settled = Settled::default();
    let refused = verdicts.iter().any(|verdict| verdict.limited);
    if refused && request.shortfall != Shortfall::Refuse && request.action == Action::Take {
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
    let settlement = Settlement::of(
        &request,
        verdicts
            .iter()
            .zip(call.limiters)
            .map(|(verdict, limiter)| (*verdict, limiter.limit())),
    );
    if settlement.admitted && request.action == Action::Take {
        settled.granted = request.quantity;
        settled.lease_id = lease_id(&decisions[..count]).filter(|_| call.write);
    }
    for index in 0..count {
        let (Some(key), decision) = (&mut keys[index], &decisions[index]) else {
            continue;
        };
        let verdict = &mut verdicts[index];
        match settlement.conclusion(call.write, decision.starts_block, verdict) {
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
                *verdict = standing(call, &call.limiters[index], key, peek, scratch)?;
            }
            Conclusion::AsDecided => {}
        }
    }
    Ok(settled)
}

/// The limiters of a call that did not all admit its take, decided again by its shortfall.
struct All<'a, K> {
    limiters: &'a [Limiter],
    keys: &'a [Option<K>],
    buffers: &'a mut [Vec<u8>],
    decisions: &'a mut [Decision],
    verdicts: &'a mut [Verdict],
    scratch: &'a mut Scratch,
    /// Whether the call writes (else a dry run).
    write: bool,
}

impl<K: Key> All<'_, K> {
    /// Settles a take some limiter refused by its shortfall: the request as settled (a
    /// partial one cut to what fits), and what the call did.
    #[cold]
    #[inline(never)]
    fn settle(
        &mut self,
        now: Micros,
        request: Request,
        spare: &mut Vec<u8>,
    ) -> Result<(Request, Settled), K::Error> {
        let mut settled = Settled::default();
        if request.quantity == 0 {
            return Ok((request, settled));
        }
        let request = match request.shortfall {
            Shortfall::Refuse => request,
            Shortfall::Delay(max_wait) => {
                settled.wait = self.delay(now, &request, max_wait)?;
                request
            }
            Shortfall::TakePart => self.take_part(now, &request)?,
            Shortfall::Owe => {
                settled.owed = self.owe(now, &request, spare)?;
                request
            }
        };
        Ok((request, settled))
    }

    /// Decides every limiter again, for `request` at `at`.
    fn decide_at(&mut self, at: Micros, request: &Request) -> Result<(), K::Error> {
        for (index, limiter) in self.limiters.iter().enumerate() {
            let Some(key) = &self.keys[index] else {
                continue;
            };
            self.decisions[index] = decide(
                limiter,
                key,
                at,
                request,
                &mut self.buffers[index],
                self.scratch,
                &mut self.verdicts[index],
            )?;
        }
        Ok(())
    }

    /// When every limiter that refused the take now admits it, as far as they say: the
    /// longest wait they name from `at`; `None` when one never will.
    fn longest_wait(&self) -> Option<Ticks> {
        let mut longest = Ticks(0);
        for verdict in self.verdicts.iter().filter(|verdict| verdict.limited) {
            if verdict.retry_after.is_none() {
                return None;
            }
            longest = longest.max(verdict.retry_after.or(longest));
        }
        Some(longest)
    }

    /// `DELAY max_wait`: decides the take at the earliest time `t` every limiter admits it,
    /// if `t - now` is at most `max_wait`, and returns that wait (each reply then stands as
    /// at `now`: nothing more fits before `t`). Otherwise the take stays refused, each
    /// refusal's wait the time from which the same call would be admitted.
    fn delay(
        &mut self,
        now: Micros,
        request: &Request,
        max_wait: Micros,
    ) -> Result<Micros, K::Error> {
        let mut at = now;
        for _ in 0..DELAY_ROUNDS {
            let Some(wait) = self.longest_wait() else {
                break; // Never fits: refused as without DELAY.
            };
            at = at.saturating_add(wait.ceil_micros());
            if at - now > max_wait {
                break;
            }
            self.decide_at(at, request)?;
            if self.verdicts.iter().all(|verdict| !verdict.limited) {
                let later = (at - now).ticks();
                for verdict in self.verdicts.iter_mut() {
                    verdict.remaining = 0;
                    verdict.reset_after = verdict.reset_after + later;
                }
                return Ok(at - now);
            }
        }
        if at > now {
            // Refused: the replies as at `now`, each wait shortened by what the caller
            // accepts (the combined wait: from when the whole call would be admitted).
            let needed = (at - now).ticks();
            self.decide_at(now, request)?;
            let accepted = max_wait.ticks();
            for verdict in self.verdicts.iter_mut().filter(|verdict| verdict.limited) {
                if verdict.retry_after.is_some() {
                    let wait = verdict.retry_after.or(needed);
                    verdict.retry_after = RetryAfter::of(wait.max(needed) - accepted);
                }
            }
        }
        Ok(Micros(0))
    }

    /// `AT_MOST`: the request cut to what every limiter admits now; when nothing fits, a
    /// request of 1, refused as any other (and starting a block, with `BLOCK`).
    fn take_part(&mut self, now: Micros, request: &Request) -> Result<Request, K::Error> {
        let fits = self
            .verdicts
            .iter()
            .filter(|verdict| verdict.limited)
            .map(|verdict| u64::try_from(verdict.remaining).unwrap_or(0))
            .fold(request.quantity, u64::min);
        let part = request.with_quantity(fits.max(1));
        self.decide_at(now, &part)?;
        Ok(part)
    }

    /// `FORCE`: each limiter that refused the take charges it anyway, what fits now and
    /// the rest when it fits; returns true (something is owed).
    fn owe(
        &mut self,
        now: Micros,
        request: &Request,
        spare: &mut Vec<u8>,
    ) -> Result<bool, K::Error> {
        for (index, limiter) in self.limiters.iter().enumerate() {
            let Some(key) = &self.keys[index] else {
                continue;
            };
            if !self.verdicts[index].limited {
                continue;
            }
            let (verdict, plan) = match limiter {
                // A lease is taken whole or not at all (the commands refuse FORCE with one).
                Limiter::Lease(_) => continue,
                Limiter::Log(log_limiter) => {
                    // Placed on the log itself when the call commits, which gives the reply
                    // then; a dry run places it on a copy.
                    let verdict = if self.write {
                        Verdict {
                            limited: false,
                            retry_after: RetryAfter::NONE,
                            ..self.verdicts[index]
                        }
                    } else {
                        let log = key.native::<SlidingLog>()?;
                        let mut copy = log.as_deref().cloned().unwrap_or_default();
                        force_log(log_limiter, &mut copy, now, request.quantity)
                    };
                    let plan = Plan::Log(*log_limiter, LogWrite::Force);
                    (verdict, plan)
                }
                limiter => {
                    let stored = key.string(|len| limiter.accepts_length(len))?;
                    let buffer = &mut self.buffers[index];
                    let decision = force_string(
                        limiter,
                        stored,
                        now,
                        request.quantity,
                        self.scratch,
                        buffer,
                        spare,
                    )?;
                    (decision.verdict, Plan::String(decision.write))
                }
            };
            self.verdicts[index] = verdict;
            self.decisions[index] = Decision {
                plan,
                starts_block: false,
            };
        }
        Ok(true)
    }
}

/// Decides `limiter` on its open `key` for `request` at `at`, changing nothing: its reply
/// goes to `verdict`, a new string state to `buffer`.
#[inline(always)]
fn decide<K: Key>(
    limiter: &Limiter,
    key: &K,
    at: Micros,
    request: &Request,
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
                starts_block: matches!(write, LogWrite::StartBlock(_)),
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
            let next_id = acquires.then(|| lease::next_id(set.as_deref(), at));
            Decision {
                plan: Plan::Lease(*lease_limiter, next_id),
                starts_block: false,
            }
        }
        limiter => {
            let stored = key.string(|len| limiter.accepts_length(len))?;
            let decision = decide_string(limiter, stored, at, request, true, scratch, buffer)?;
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
        Limiter::Lease(lease_limiter) => {
            let set = key.native::<LeaseSet>()?;
            lease_limiter.inspect(set.as_deref(), call.now, 0)
        }
        limiter => {
            let stored = key.string(|len| limiter.accepts_length(len))?;
            decide_string(limiter, stored, call.now, &look, false, scratch, peek)?.verdict
        }
    })
}

/// The one id every lease of an admitted call takes: the highest any of its sets gives
/// next, so that ids still only grow within each key, and one id releases them all.
fn lease_id(decisions: &[Decision]) -> Option<u64> {
    decisions
        .iter()
        .filter_map(|decision| match decision.plan {
            Plan::Lease(_, next_id) => next_id,
            _ => None,
        })
        .max()
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
        Plan::Lease(limiter, Some(_)) => {
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
        Plan::Lease(_, None) => {}
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
        Effect::Set { .. } | Effect::SetRange { .. } | Effect::ExpireAt(_) | Effect::Delete => {
            Ok(None)
        }
    }
}

#[cfg(test)]
pub mod memory;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod shortfall_tests;
