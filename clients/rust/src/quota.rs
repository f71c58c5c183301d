//! Quota leases for one hot limit: a process takes up to `batch` of a limit in one call
//! (`AT_MOST`) and spends it locally, so that one key's decisions are not bounded by one
//! shard's thread and a round trip each. What is unused `hold` after it was taken is given
//! back (`REFUND`).
//!
//! The bound: in any window, what N processes admit exceeds what the server alone would
//! admit by at most N x batch (each holds at most `batch` taken earlier; every unit it spends
//! was counted by the server when taken). `batch` 1 is one call per decision, as `check`.
//!
//! While the limit binds, a take that gets nothing learns when one unit fits
//! (`retry_after`): until then `take` refuses without asking, so a refused quota costs the
//! server one call per `retry_after`, not one per request.

use std::sync::Mutex;
use std::time::Duration;

use crate::blocking::{BlockingConnection, RateLimiter};
use crate::policy::policy_name;
use crate::protocol::{Limiter, Options, RateLimit};
use crate::resilience::{Clock, Error};

/// What a process holds of a quota, with no I/O: the units taken and not yet spent, and
/// when they are given back.
#[derive(Debug)]
pub struct Ledger {
    batch: u64,
    hold: Duration,
    /// Units taken and not spent.
    pub held: u64,
    expires_at: Option<Duration>,
    /// Refused by the server: no call before then.
    refused_until: Duration,
    /// Decisions taken, units admitted, and calls to the server: what a lease saves.
    pub decisions: u64,
    /// Units admitted.
    pub admitted: u64,
    /// Calls to the server.
    pub calls: u64,
}

impl Ledger {
    /// An empty ledger (`batch` at least 1, `hold` more than zero).
    pub fn new(batch: u64, hold: Duration) -> Ledger {
        assert!(
            batch >= 1 && !hold.is_zero(),
            "batch is at least 1 and hold more than 0"
        );
        Ledger {
            batch,
            hold,
            held: 0,
            expires_at: None,
            refused_until: Duration::ZERO,
            decisions: 0,
            admitted: 0,
            calls: 0,
        }
    }

    /// The units to give back at `now` (their hold ended), forgotten.
    pub fn expired(&mut self, now: Duration) -> u64 {
        match self.expires_at {
            Some(at) if self.held > 0 && now >= at => self.release(),
            _ => 0,
        }
    }

    /// Everything held, forgotten.
    pub fn release(&mut self) -> u64 {
        self.expires_at = None;
        std::mem::take(&mut self.held)
    }

    /// Spends `quantity` of what is held, if it is there.
    pub fn spend(&mut self, quantity: u64) -> bool {
        if self.held >= quantity {
            self.held -= quantity;
            self.admitted += quantity;
            true
        } else {
            false
        }
    }

    /// How much to ask for: enough to hold `batch` (or `quantity`, if more).
    pub fn wanted(&self, quantity: u64) -> u64 {
        self.batch.max(quantity) - self.held
    }

    /// Whether the server refused recently enough that asking again is pointless.
    pub fn refused(&self, now: Duration) -> bool {
        now < self.refused_until
    }

    /// The server took nothing, and said when one unit fits (`None`: never, at this size).
    pub fn refused_for(&mut self, now: Duration, retry_after: Option<Duration>) {
        if let Some(retry_after) = retry_after {
            self.refused_until = now + retry_after;
        }
    }

    /// The server granted `units` at `now`.
    pub fn granted(&mut self, now: Duration, units: u64) {
        self.calls += 1;
        if units > 0 {
            if self.held == 0 {
                self.expires_at = Some(now + self.hold);
            }
            self.held += units;
        }
    }

    /// Until what is held is given back, if anything is.
    pub fn delay(&self, now: Duration) -> Option<Duration> {
        match self.expires_at {
            Some(at) if self.held > 0 => Some(at.saturating_sub(now)),
            _ => None,
        }
    }

    /// A take of `quantity` at `now`, before any call: the units whose hold ended, to give
    /// back first, and what the take does.
    pub fn begin(&mut self, now: Duration, quantity: u64) -> (u64, Take) {
        self.decisions += 1;
        let expired = self.expired(now);
        let take = if self.spend(quantity) {
            Take::Spent
        } else if self.refused(now) {
            Take::Refused
        } else {
            Take::Ask(Options::new().quantity(self.wanted(quantity)).at_most())
        };
        (expired, take)
    }

    /// What a take decides from the server's answer to `AT_MOST` (`None`: decided by
    /// `on_error`, nothing taken: the answer's own).
    fn answered(&mut self, now: Duration, quantity: u64, result: &RateLimit) -> bool {
        if result.failed {
            self.granted(now, 0);
            return result.allowed;
        }
        if !result.allowed {
            self.refused_for(now, result.retry_after);
        }
        self.granted(now, result.granted.unwrap_or(0));
        self.spend(quantity)
    }
}

/// What a take does once the ledger has looked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// Admitted from what is held.
    Spent,
    /// Refused without asking: the server said when one unit fits, and that is not yet.
    Refused,
    /// Asks the server for this (`AT_MOST`).
    Ask(Options),
}

/// Leases of `limiters` (one call's worth: taken all or nothing) through a blocking
/// [`RateLimiter`], `batch` units at a time, each held at most `hold`. What is unused is
/// given back at the first take after its hold ends, or on [`Quota::close`]. Thread-safe.
pub struct Quota<'a, C> {
    limiter: &'a RateLimiter<C>,
    limiters: Vec<Limiter>,
    clock: Clock,
    /// What this process holds.
    pub ledger: Mutex<Ledger>,
}

impl<'a, C: BlockingConnection> Quota<'a, C> {
    /// A quota of `limiters` through `limiter`.
    pub fn new(
        limiter: &'a RateLimiter<C>,
        limiters: Vec<Limiter>,
        batch: u64,
        hold: Duration,
        clock: Clock,
    ) -> Self {
        Quota {
            limiter,
            limiters,
            clock,
            ledger: Mutex::new(Ledger::new(batch, hold)),
        }
    }

    /// Whether a request of `quantity` may go ahead: from what this process holds, or after
    /// taking up to `batch` more in one call.
    pub fn take(&self, quantity: u64) -> Result<bool, Error> {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        let (expired, take) = ledger.begin((self.clock)(), quantity);
        self.give_back(expired)?;
        match take {
            Take::Spent => {
                let policy = policy_name(&self.limiters);
                self.limiter.policy().count(&policy, "quota");
                Ok(true)
            }
            Take::Refused => Ok(false),
            Take::Ask(options) => {
                let result = self.limiter.check(&self.limiters, options)?;
                Ok(ledger.answered((self.clock)(), quantity, &result))
            }
        }
    }

    /// Gives back whatever is held.
    pub fn close(&self) -> Result<(), Error> {
        let units = self
            .ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .release();
        self.give_back(units)
    }

    fn give_back(&self, units: u64) -> Result<(), Error> {
        if units > 0 {
            self.limiter
                .check(&self.limiters, Options::new().quantity(units).refund())?;
        }
        Ok(())
    }
}

#[cfg(feature = "tokio")]
pub use self::tokio_quota::AsyncQuota;

#[cfg(feature = "tokio")]
mod tokio_quota {
    use super::*;
    use crate::asynchronous::AsyncRateLimiter;
    use redis::aio::ConnectionLike;
    use std::sync::Arc;

    /// [`Quota`] through an [`AsyncRateLimiter`]: what is unused is given back when its hold
    /// ends by a task of its own, or on [`AsyncQuota::close`].
    pub struct AsyncQuota<C> {
        limiter: Arc<AsyncRateLimiter<C>>,
        limiters: Vec<Limiter>,
        clock: Clock,
        /// What this process holds.
        pub ledger: tokio::sync::Mutex<Ledger>,
        armed: Mutex<bool>,
    }

    impl<C> AsyncQuota<C>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        /// A quota of `limiters` through `limiter`.
        pub fn new(
            limiter: Arc<AsyncRateLimiter<C>>,
            limiters: Vec<Limiter>,
            batch: u64,
            hold: Duration,
            clock: Clock,
        ) -> Arc<Self> {
            Arc::new(AsyncQuota {
                limiter,
                limiters,
                clock,
                ledger: tokio::sync::Mutex::new(Ledger::new(batch, hold)),
                armed: Mutex::new(false),
            })
        }

        /// Whether a request of `quantity` may go ahead (see [`Quota::take`]).
        pub async fn take(self: &Arc<Self>, quantity: u64) -> Result<bool, Error> {
            let mut ledger = self.ledger.lock().await;
            let (expired, take) = ledger.begin((self.clock)(), quantity);
            self.give_back(expired).await?;
            let options = match take {
                Take::Spent => {
                    let policy = policy_name(&self.limiters);
                    self.limiter.policy().count(&policy, "quota");
                    return Ok(true);
                }
                Take::Refused => return Ok(false),
                Take::Ask(options) => options,
            };
            let result = self.limiter.check(&self.limiters, options).await?;
            let admitted = ledger.answered((self.clock)(), quantity, &result);
            if let Some(delay) = ledger.delay((self.clock)()) {
                self.arm(delay);
            }
            Ok(admitted)
        }

        /// Gives back whatever is held.
        pub async fn close(&self) -> Result<(), Error> {
            let units = self.ledger.lock().await.release();
            self.give_back(units).await
        }

        async fn give_back(&self, units: u64) -> Result<(), Error> {
            if units > 0 {
                let options = Options::new().quantity(units).refund();
                self.limiter.check(&self.limiters, options).await?;
            }
            Ok(())
        }

        /// Gives back at the hold's end even if no request comes to notice it.
        fn arm(self: &Arc<Self>, delay: Duration) {
            let mut armed = self.armed.lock().unwrap_or_else(|p| p.into_inner());
            if *armed {
                return;
            }
            *armed = true;
            let quota = Arc::downgrade(self);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let Some(quota) = quota.upgrade() else {
                    return;
                };
                *quota.armed.lock().unwrap_or_else(|p| p.into_inner()) = false;
                let mut ledger = quota.ledger.lock().await;
                let now = (quota.clock)();
                // A failed give-back is the server's failure: the units expire with the key.
                let _ = quota.give_back(ledger.expired(now)).await;
                if let Some(delay) = ledger.delay(now) {
                    drop(ledger);
                    quota.arm(delay);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn granted(units: u64) -> RateLimit {
        RateLimit {
            allowed: units > 0,
            granted: Some(units),
            retry_after: (units == 0).then_some(ms(300)),
            ..RateLimit::default()
        }
    }

    #[test]
    fn a_ledger_spends_what_it_took_asks_once_per_retry_after_and_gives_back_after_hold() {
        let mut ledger = Ledger::new(10, ms(500));
        let ask = |take| matches!(take, Take::Ask(o) if o.quantity == 10 && o.shortfall == crate::Shortfall::AtMost);
        let (expired, take) = ledger.begin(ms(0), 1);
        assert!(expired == 0 && ask(take));
        assert!(ledger.answered(ms(0), 1, &granted(10)));
        for _ in 0..9 {
            assert_eq!(ledger.begin(ms(1), 1), (0, Take::Spent));
        }
        // Used up: the server grants nothing and says 300 ms; until then, no call.
        let (_, take) = ledger.begin(ms(2), 1);
        assert!(ask(take));
        assert!(!ledger.answered(ms(2), 1, &granted(0)));
        assert_eq!(ledger.begin(ms(301), 1), (0, Take::Refused));
        assert!(ask(ledger.begin(ms(302), 1).1));
        assert!(ledger.answered(ms(302), 1, &granted(4)));
        // Held from 302 ms: what is left goes back at 802 ms.
        assert_eq!(ledger.begin(ms(801), 1), (0, Take::Spent));
        let (expired, take) = ledger.begin(ms(802), 1);
        assert_eq!(expired, 2);
        assert!(ask(take));
        assert_eq!((ledger.admitted, ledger.calls), (12, 3));
    }
}
