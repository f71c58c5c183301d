//! What a take that does not fit now does instead of being refused, for every limiter of a
//! call at once: `DELAY` ([`All::delay`]), `AT_MOST` ([`All::at_most`]) and `FORCE`
//! ([`All::force`]). The engine ([`super::decide_and_commit`]) hands them the call once every limiter has
//! decided; they decide again, as the option says, and leave each limiter's reply and what
//! it will store.

use super::plan::{decide, Decision, Plan, Settled};
use super::store::Key;
use crate::core::limiter::{force_log, force_string, Limiter, LogWrite};
use crate::core::log::SlidingLog;
use crate::core::request::{Request, Shortfall};
use crate::core::time::{Micros, Ticks};
use crate::core::verdict::{RetryAfter, Verdict};
use crate::core::windows::Scratch;

/// How many times a delayed call looks for the time every limiter admits it. Each limiter
/// fits from the time it names on, so the first look finds it; the others are a margin.
const DELAY_ROUNDS: usize = 4;

/// The limiters of a call that did not all admit its take, decided again by its shortfall.
pub(super) struct All<'a, K> {
    pub(super) limiters: &'a [Limiter],
    pub(super) keys: &'a [Option<K>],
    pub(super) buffers: &'a mut [Vec<u8>],
    pub(super) decisions: &'a mut [Decision],
    pub(super) verdicts: &'a mut [Verdict],
    pub(super) scratch: &'a mut Scratch,
    /// Whether the call writes (else a dry run).
    pub(super) write: bool,
}

impl<K: Key> All<'_, K> {
    /// Settles a take some limiter refused by its shortfall: the request as settled (a
    /// partial one cut to what fits), and what the call did.
    #[cold]
    #[inline(never)]
    pub(super) fn settle(
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
            Shortfall::AtMost => self.at_most(now, &request)?,
            Shortfall::Force => {
                settled.forced = self.force(now, &request, spare)?;
                request
            }
        };
        Ok((request, settled))
    }

    /// Decides every limiter again, for `request` at `at`; a load gate keeps what it
    /// decided (a shed request never reaches a shortfall rule, and the commands refuse
    /// `DELAY`, `AT_MOST` and `FORCE` with one).
    fn decide_at(&mut self, at: Micros, request: &Request) -> Result<(), K::Error> {
        for (index, limiter) in self.limiters.iter().enumerate() {
            let Some(key) = &self.keys[index] else {
                continue;
            };
            if matches!(limiter, Limiter::Load(_)) {
                continue;
            }
            self.decisions[index] = decide(
                limiter,
                key,
                at,
                request,
                0,
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
        let mut longest = Ticks::ZERO;
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
        Ok(Micros::ZERO)
    }

    /// `AT_MOST`: the request cut to what every limiter admits now; when nothing fits, a
    /// request of 1, refused as any other (and starting a block, with `BLOCK`).
    fn at_most(&mut self, now: Micros, request: &Request) -> Result<Request, K::Error> {
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
    /// the rest when it fits; returns true (something is forced).
    fn force(
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
                // A lease is taken whole or not at all, and a gate sheds or not (the commands
                // refuse FORCE with either).
                Limiter::Lease(_) | Limiter::Load(_) => continue,
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
                writes_refused: false,
            };
        }
        Ok(true)
    }
}
