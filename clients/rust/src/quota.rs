//! Quota leases for one hot limit: a process takes up to `batch` of a limit in one call
//! (`AT_MOST`) and spends it locally, so that one key's decisions are not bounded by one
//! shard's thread and a round trip each. What is unused `hold` after it was taken is given
//! back (`REFUND`).
//!
//! The bound: in any window, what N processes admit exceeds what the server alone would
//! admit by at most N x batch (each holds at most `batch` taken earlier; every unit it spends
//! was counted by the server when taken). `batch` 1 is one call per decision, as `check`.
//!
//! While the limit binds, a lease stays batched. A take that gets less than it asked for
//! (the units that refilled since the last call) marks the limit as binding; from then on a
//! take asks for half a batch at once, waiting for it on the server (`DELAY`, up to `hold`):
//! the server answers when it fits, and the process spends it from then, refusing without
//! asking until then. So a binding limit costs at most one call per half batch admitted, and
//! a refusal (half a batch does not fit within `hold`) one call per `retry_after`, not one
//! per request. A take that finds half a batch there at once asks for a whole batch again
//! (`AT_MOST`). Half a batch is at most the smallest limit of the limiters.

use std::sync::Mutex;
use std::time::Duration;

use crate::blocking::{BlockingConnection, RateLimiter};
use crate::policy::policy_name;
use crate::protocol::{validate, InvalidArgument, Kind, Limiter, Options, RateLimit};
use crate::resilience::{Clock, Error};

/// What a process holds of a quota, with no I/O: the units taken and not yet spent, and
/// when they are given back.
#[derive(Debug)]
pub struct Ledger {
    batch: u64,
    hold: Duration,
    /// What a take asks for while the limit binds: half a batch, at most the least limit.
    half: u64,
    /// Units taken and not spent.
    pub held: u64,
    expires_at: Option<Duration>,
    /// What is held may be spent from then on (a take the server made wait).
    available_at: Duration,
    /// Refused by the server: no call before then.
    refused_until: Duration,
    /// The last take got less than it asked for: ask for half a batch and wait for it.
    binding: bool,
    /// Decisions taken, units admitted, and calls to the server: what a lease saves.
    pub decisions: u64,
    /// Units admitted.
    pub admitted: u64,
    /// Calls to the server.
    pub calls: u64,
}

impl Ledger {
    /// An empty ledger of leases of `limiters`.
    ///
    /// # Errors
    ///
    /// A batch of 0, a zero hold, or limiters a call would refuse.
    pub fn new(
        batch: u64,
        hold: Duration,
        limiters: &[Limiter],
    ) -> Result<Ledger, InvalidArgument> {
        if batch < 1 || batch > i64::MAX as u64 {
            return Err(InvalidArgument(format!("batch is at least 1, not {batch}")));
        }
        if hold.is_zero() {
            return Err(InvalidArgument(
                "hold is a positive duration, not zero".into(),
            ));
        }
        validate(limiters, &Options::new())?;
        let half = limiters
            .iter()
            .filter_map(|limiter| match limiter.kind {
                Kind::Throttle { max_burst, .. } => Some(max_burst + 1),
                Kind::Window { limit, .. } | Kind::Log { limit, .. } => Some(limit),
                Kind::Load { .. } | Kind::Lease { .. } => None,
            })
            .fold(batch.div_ceil(2), u64::min);
        Ok(Ledger {
            batch,
            hold,
            half,
            held: 0,
            expires_at: None,
            available_at: Duration::ZERO,
            refused_until: Duration::ZERO,
            binding: false,
            decisions: 0,
            admitted: 0,
            calls: 0,
        })
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

    /// Spends `quantity` of what is held at `now`, if it is there and may be spent.
    pub fn spend(&mut self, now: Duration, quantity: u64) -> bool {
        if self.held >= quantity && now >= self.available_at {
            self.held -= quantity;
            self.admitted += quantity;
            true
        } else {
            false
        }
    }

    /// What to ask the server for, and how: enough to hold `batch` (or `quantity`, if more),
    /// taking what fits (`AT_MOST`); while the limit binds, half a batch (no more than holds
    /// a batch, or what `quantity` lacks, if more) at once, waiting for it up to `hold`
    /// (`DELAY`).
    pub fn ask(&self, quantity: u64) -> Options {
        if self.binding {
            let half = self.half.min(self.batch.saturating_sub(self.held));
            let units = half.max(quantity.saturating_sub(self.held));
            Options::new().quantity(units).delay(self.hold)
        } else {
            Options::new()
                .quantity(self.batch.max(quantity) - self.held)
                .at_most()
        }
    }

    /// Whether asking the server at `now` is pointless: it refused recently, or what is
    /// held may not be spent yet.
    pub fn refused(&self, now: Duration) -> bool {
        now < self.refused_until || (self.held > 0 && now < self.available_at)
    }

    /// What the server answered at `now` a take `asked` as [`Ledger::ask`] said.
    pub fn answered_take(&mut self, now: Duration, asked: &Options, result: &RateLimit) {
        self.calls += 1;
        if !result.allowed {
            // Nothing taken; it says when what was asked fits (`None`: never, at this size).
            if let Some(retry_after) = result.retry_after {
                self.refused_until = now + retry_after;
            }
            self.binding = self.batch > 1;
        } else if self.binding {
            // Half a batch was there at once: the limit may no longer bind.
            self.binding = !result.wait.is_zero();
            self.add(now, asked.quantity, result.wait);
        } else {
            let units = result.granted.unwrap_or(0);
            self.binding = self.batch > 1 && units < asked.quantity;
            self.add(now, units, Duration::ZERO);
        }
    }

    fn add(&mut self, now: Duration, units: u64, wait: Duration) {
        if units > 0 {
            self.available_at = now + wait;
            if self.held == 0 {
                self.expires_at = Some(now + wait + self.hold);
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
        let take = if self.spend(now, quantity) {
            Take::Spent
        } else if self.refused(now) {
            Take::Refused
        } else {
            Take::Ask(self.ask(quantity))
        };
        (expired, take)
    }

    /// What a take of `quantity` decides from the server's answer to `asked` (decided by
    /// `on_error` when the call failed: nothing taken, the answer's own).
    fn answered(
        &mut self,
        now: Duration,
        quantity: u64,
        asked: &Options,
        result: &RateLimit,
    ) -> bool {
        if result.failed {
            self.calls += 1;
            return result.allowed;
        }
        self.answered_take(now, asked, result);
        self.spend(now, quantity)
    }
}

/// What a take does once the ledger has looked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// Admitted from what is held.
    Spent,
    /// Refused without asking: the server said when what was asked fits, or when what is
    /// held may be spent, and that is not yet.
    Refused,
    /// Asks the server for this ([`Ledger::ask`]).
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

impl<C> std::fmt::Debug for Quota<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quota")
            .field("limiters", &self.limiters)
            .field("ledger", &self.ledger)
            .finish_non_exhaustive()
    }
}

impl<'a, C: BlockingConnection> Quota<'a, C> {
    /// A quota of `limiters` through `limiter`; an error for what [`Ledger::new`] refuses.
    pub fn new(
        limiter: &'a RateLimiter<C>,
        limiters: Vec<Limiter>,
        batch: u64,
        hold: Duration,
        clock: Clock,
    ) -> Result<Self, InvalidArgument> {
        Ok(Quota {
            limiter,
            clock,
            ledger: Mutex::new(Ledger::new(batch, hold, &limiters)?),
            limiters,
        })
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
                Ok(ledger.answered((self.clock)(), quantity, &options, &result))
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

    impl<C> std::fmt::Debug for AsyncQuota<C> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("AsyncQuota")
                .field("limiters", &self.limiters)
                .finish_non_exhaustive()
        }
    }

    impl<C> AsyncQuota<C>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        /// A quota of `limiters` through `limiter`; an error for what [`Ledger::new`]
        /// refuses.
        pub fn new(
            limiter: Arc<AsyncRateLimiter<C>>,
            limiters: Vec<Limiter>,
            batch: u64,
            hold: Duration,
            clock: Clock,
        ) -> Result<Arc<Self>, InvalidArgument> {
            Ok(Arc::new(AsyncQuota {
                limiter,
                clock,
                ledger: tokio::sync::Mutex::new(Ledger::new(batch, hold, &limiters)?),
                limiters,
                armed: Mutex::new(false),
            }))
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
            let admitted = ledger.answered((self.clock)(), quantity, &options, &result);
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

    /// What a `DELAY` take answers: admitted, to go ahead after `wait`.
    fn scheduled(wait: Duration) -> RateLimit {
        RateLimit {
            allowed: true,
            wait,
            ..RateLimit::default()
        }
    }

    fn log(limit: u64) -> Vec<Limiter> {
        vec![Limiter::log("q", limit, Duration::from_secs(60))]
    }

    #[test]
    fn a_ledger_spends_what_it_took_and_gives_back_after_hold() {
        let mut ledger = Ledger::new(10, ms(500), &log(100)).unwrap();
        let ask = |take| matches!(take, Take::Ask(o) if o.quantity == 10 && o.shortfall == crate::Shortfall::AtMost);
        let (expired, take) = ledger.begin(ms(0), 1);
        assert!(expired == 0 && ask(take));
        let Take::Ask(options) = take else {
            unreachable!()
        };
        assert!(ledger.answered(ms(0), 1, &options, &granted(10)));
        for _ in 0..9 {
            assert_eq!(ledger.begin(ms(1), 1), (0, Take::Spent));
        }
        // Used up: the server grants nothing and says 300 ms; until then, no call.
        let (_, take) = ledger.begin(ms(2), 1);
        assert!(ask(take));
        assert!(!ledger.answered(ms(2), 1, &options, &granted(0)));
        assert_eq!(ledger.begin(ms(301), 1), (0, Take::Refused));
        // The limit binds: half a batch, waited for up to the hold.
        let (_, take) = ledger.begin(ms(302), 1);
        let half = Options::new().quantity(5).delay(ms(500));
        assert_eq!(take, Take::Ask(half));
        // Scheduled in 100 ms: refused without a call until then, spent after.
        assert!(!ledger.answered(ms(302), 1, &half, &scheduled(ms(100))));
        assert_eq!(ledger.begin(ms(401), 1), (0, Take::Refused));
        assert_eq!(ledger.begin(ms(402), 1), (0, Take::Spent));
        // Held from 302 ms, to spend from 402 ms: what is left goes back at 902 ms.
        assert_eq!(ledger.begin(ms(901), 1), (0, Take::Spent));
        let (expired, take) = ledger.begin(ms(902), 1);
        assert_eq!((expired, take), (3, Take::Ask(half)));
        assert_eq!((ledger.admitted, ledger.calls), (12, 3));
    }

    #[test]
    fn a_partial_grant_binds_and_half_a_batch_at_once_unbinds() {
        let mut ledger = Ledger::new(10, ms(500), &log(100)).unwrap();
        let at_most = Options::new().quantity(10).at_most();
        assert_eq!(ledger.ask(1), at_most);
        assert!(ledger.answered(ms(0), 1, &at_most, &granted(3)));
        let half = Options::new().quantity(5).delay(ms(500));
        assert_eq!(ledger.ask(3), half);
        // Half a batch there at once: ask for a whole batch again.
        ledger.answered_take(ms(1), &half, &scheduled(Duration::ZERO));
        assert_eq!(ledger.ask(1), Options::new().quantity(3).at_most());
        // Half a batch is at most the least limit; a batch of 1 never binds.
        assert_eq!(Ledger::new(10, ms(500), &log(3)).unwrap().half, 3);
        let mut one = Ledger::new(1, ms(500), &log(100)).unwrap();
        let single = Options::new().quantity(1).at_most();
        one.answered_take(ms(0), &single, &granted(0));
        assert_eq!(one.ask(1), single);
    }
}
