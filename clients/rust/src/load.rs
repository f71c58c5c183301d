//! Graded limiting by load, in the process: a [`LoadShedder`] reports this instance's
//! factors to the service's key every interval (`RL.LOAD.REPORT`), learns the service's
//! level from the reply, and admits each request with the share that level gives its
//! priority class, without a call per request (as the Python and Node packages' shedders
//! do). The factors are the application's own (a queue's backlog, in-flight requests, a
//! latency, a CPU share: any number a policy names), plus `requests`, the requests this
//! instance decided since its last report. Where a decision must also hold the limits in
//! the same call, use the load gate instead ([`crate::Limiter::load`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::asynchronous::AsyncRateLimiter;
use crate::protocol::{report_words, LoadStanding, Priority};
use crate::resilience::Clock;

/// Nothing shed: what a shedder stands on until a report answers, and once its last
/// report's time to live has passed.
pub const NOTHING_SHED: LoadStanding = LoadStanding {
    level: 0,
    instances: 0,
    shares: [1.0; 4],
};

type Factors = dyn Fn() -> Vec<(String, f64)> + Send + Sync;

/// The shedder: see the module's documentation. Cheap to share (`Arc`).
pub struct LoadShedder<C> {
    limiter: Arc<AsyncRateLimiter<C>>,
    service: String,
    instance: String,
    interval: Duration,
    ttl: Duration,
    shadow: bool,
    factors: Box<Factors>,
    clock: Clock,
    standing: Mutex<(LoadStanding, Option<Duration>)>,
    decided: AtomicU64,
    seed: AtomicU64,
}

impl<C> LoadShedder<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A shedder reporting to `service` as `instance` every `interval` (each report counts
    /// for three intervals), with the application's `factors`.
    pub fn new(
        limiter: Arc<AsyncRateLimiter<C>>,
        service: impl Into<String>,
        instance: impl Into<String>,
        interval: Duration,
        factors: impl Fn() -> Vec<(String, f64)> + Send + Sync + 'static,
        clock: Clock,
    ) -> Arc<Self> {
        let seed = (clock)().as_nanos() as u64 | 1;
        Arc::new(LoadShedder {
            limiter,
            service: service.into(),
            instance: instance.into(),
            interval,
            ttl: interval * 3,
            shadow: false,
            factors: Box::new(factors),
            clock,
            standing: Mutex::new((NOTHING_SHED, None)),
            decided: AtomicU64::new(0),
            seed: AtomicU64::new(seed),
        })
    }

    /// The same shedder in shadow mode: nothing is shed, what would be is counted.
    pub fn shadowed(self: Arc<Self>) -> Arc<Self> {
        let mut shedder = Arc::try_unwrap(self)
            .unwrap_or_else(|_| panic!("shadowed is set before the shedder is shared"));
        shedder.shadow = true;
        Arc::new(shedder)
    }

    /// The service's level and shares from the last report that answered; nothing shed
    /// once that report's time to live has passed.
    pub fn standing(&self) -> LoadStanding {
        let (standing, at) = *self.standing.lock().unwrap_or_else(|p| p.into_inner());
        match at {
            Some(at) if (self.clock)().saturating_sub(at) <= self.ttl => standing,
            _ => NOTHING_SHED,
        }
    }

    /// Reports now: the standing the server answered, or `None` when it failed (the last
    /// one holds until its time to live ends).
    pub async fn report(&self) -> Option<LoadStanding> {
        let mut factors = (self.factors)();
        let decided = self.decided.swap(0, Ordering::Relaxed);
        factors.push(("requests".into(), decided as f64));
        let words = report_words(&self.service, &self.instance, self.ttl, &factors);
        match self.limiter.call(&words).await {
            Ok(reply) => match LoadStanding::from_reply(&reply) {
                Ok(standing) => {
                    *self.standing.lock().unwrap_or_else(|p| p.into_inner()) =
                        (standing, Some((self.clock)()));
                    metrics::gauge!("ratelimit_load_level", "service" => self.service.clone())
                        .set(standing.level as f64);
                    Some(standing)
                }
                Err(error) => {
                    eprintln!("ratelimit: the load report of {}: {error}", self.service);
                    None
                }
            },
            Err(error) => {
                eprintln!(
                    "ratelimit: the load report of {} failed: {error}",
                    self.service
                );
                None
            }
        }
    }

    /// Reports every interval, on a task of its own, while the shedder is alive.
    pub fn start(self: &Arc<Self>) {
        let shedder = Arc::downgrade(self);
        let interval = self.interval;
        tokio::spawn(async move {
            loop {
                let Some(shedder) = shedder.upgrade() else {
                    return;
                };
                shedder.report().await;
                drop(shedder);
                tokio::time::sleep(interval).await;
            }
        });
    }

    /// Whether a request of `priority` goes on: admitted with the share the service's
    /// level gives its class, at random; in shadow mode always, counting what would be shed.
    pub fn admit(&self, priority: Priority) -> bool {
        self.decided.fetch_add(1, Ordering::Relaxed);
        let standing = self.standing();
        let admitted = self.draw() < standing.share(priority);
        let outcome = match (admitted, self.shadow) {
            (true, _) => "admitted",
            (false, true) => "shadow",
            (false, false) => "shed",
        };
        metrics::counter!(
            "ratelimit_load_decisions_total",
            "service" => self.service.clone(),
            "priority" => priority.as_str(),
            "outcome" => outcome
        )
        .increment(1);
        admitted || self.shadow
    }

    /// What a shed request is told to wait: one report interval, when the level may have
    /// changed.
    pub fn retry_after(&self) -> Duration {
        self.interval
    }

    /// A draw in [0, 1): xorshift64*, enough to spread the shares (no random crate).
    fn draw(&self) -> f64 {
        let mut x = self.seed.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.seed.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}
