//! Load shedding in the process, two checks on every request, neither a server call:
//!
//! - **the process's own limit** on requests in flight ([`ConcurrencyLimit`]): it follows
//!   the measured latency, cuts when a standing queue forms and, while congested, keeps its
//!   top places for the more important classes. It decides at once and needs no server;
//! - **the fleet's level**: a [`LoadShedder`] reports the process's health to the service's
//!   key every interval (`RL.LOAD.REPORT`: CPU, memory, requests in flight, latency, 5xx
//!   share, the requests and their successes, and what `bbr` reads, with no code from the
//!   user), and learns the service's level and the share of each priority class it admits.
//!   Every instance and gateway reporting to the key sheds by the same level.
//!
//! A request goes on only when both admit it. When the reports fail, the last level holds for
//! the report's time to live (three intervals), then nothing is shed by level; the process's
//! own limit goes on protecting it. The tower layer [`crate::layer::LoadSheddingLayer`] puts
//! it in front of an axum or tonic service; where a decision must also hold the caller's
//! limits in the same call, use the load gate instead ([`crate::Limiter::load`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use ratelimit_module::load::LoadShedder;
//! use ratelimit_module::{redis, AsyncRateLimiter, Config, Priority};
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let limiter = AsyncRateLimiter::connect(&client, Config::default()).await?;
//! // Every option at its default: the process's own limit on, reports every second.
//! let shedder = LoadShedder::builder(limiter, "load:checkout").build()?;
//! shedder.start();
//! if let Some(ticket) = shedder.admit(Priority::Critical) {
//!     // ... serve the request, then:
//!     shedder.finished(ticket, 200);
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::asynchronous::AsyncRateLimiter;
pub use crate::concurrency::{ConcurrencyLimit, LimitOptions};
use crate::protocol::{report_words, InvalidArgument, LoadStanding, Priority};
use crate::resilience::{monotonic, Clock};
use crate::signals::{counts_for_service, Signals};

/// Nothing shed: what a shedder stands on until a report answers, and once its last
/// report's time to live has passed.
pub const NOTHING_SHED: LoadStanding = LoadStanding {
    level: 0,
    instances: 0,
    shares: [1.0; 4],
};

type Factors = dyn Fn() -> Vec<(String, f64)> + Send + Sync;

/// What [`LoadShedder::admit`] gives a request that goes on, for
/// [`LoadShedder::finished`].
#[derive(Clone, Copy, Debug)]
#[must_use = "hand the ticket to `finished` when the request ends"]
pub struct Ticket {
    started: Duration,
    counted: bool,
}

impl Ticket {
    /// Whether the process's limit counts the request in flight (there is one, and it
    /// admitted the request, not only shadow mode): only then do its waits on the server
    /// change anything ([`LoadShedder::waiting`]).
    pub(crate) fn counted(&self) -> bool {
        self.counted
    }
}

/// The process's own limit at one moment ([`LoadShedder::limit`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LocalLimit {
    /// The requests it admits at once now.
    pub limit: f64,
    /// Whether a standing queue was found and has not cleared (the shares then apply).
    pub congested: bool,
    /// The requests it counts in flight.
    pub in_flight: u64,
}

/// What the shedder keeps behind one lock: the process's limit and signals.
struct Local {
    limit: Option<ConcurrencyLimit>,
    signals: Signals,
}

/// The shedder: see the module's documentation. Made with [`LoadShedder::builder`];
/// shared as an `Arc`.
pub struct LoadShedder<C> {
    limiter: Arc<AsyncRateLimiter<C>>,
    service: String,
    instance: String,
    interval: Duration,
    ttl: Duration,
    shadow: bool,
    factors: Option<Box<Factors>>,
    clock: Clock,
    local: Mutex<Local>,
    standing: Mutex<(LoadStanding, Option<Duration>)>,
    started: AtomicBool,
    seed: AtomicU64,
    /// How far behind the runtime runs, in µs: what a request waited before the layer saw it.
    lag: AtomicU64,
}

/// The limit's defaults but for `sojourn`, infinite: the wait a request is decided with here is
/// the runtime's lag (a timer's lateness), the same for every request, not its own.
fn lag_limit_options() -> LimitOptions {
    LimitOptions {
        sojourn: f64::INFINITY,
        ..LimitOptions::default()
    }
}

/// How often the runtime's lag is measured, and the timer's own lateness left out of it.
const LAG_TICK: Duration = Duration::from_millis(5);
const TIMER_SLACK: Duration = Duration::from_millis(1);

/// Builds a [`LoadShedder`]; every option has a default.
pub struct LoadShedderBuilder<C> {
    limiter: Arc<AsyncRateLimiter<C>>,
    service: String,
    instance: Option<String>,
    interval: Duration,
    ttl: Option<Duration>,
    shadow: bool,
    factors: Option<Box<Factors>>,
    limit: Option<LimitOptions>,
    clock: Clock,
}

/// This process's name among the service's instances: `host:pid`.
pub fn default_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "rust".into());
    format!("{host}:{}", std::process::id())
}

impl<C> LoadShedderBuilder<C> {
    /// This process's name among the service's instances (`host:pid` by default).
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    /// How often it reports (1 s by default).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// How long a report counts (three intervals by default).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Shadow mode: nothing is shed; what would be is counted (`outcome="shadow"`) and
    /// logged. Off by default.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// The application's own factors, added to each report (a queue's backlog, a pool's
    /// waiters: any number a policy declares with `FACTOR`).
    pub fn factors(
        mut self,
        factors: impl Fn() -> Vec<(String, f64)> + Send + Sync + 'static,
    ) -> Self {
        self.factors = Some(Box::new(factors));
        self
    }

    /// The process's own limit with these options (on unless
    /// [`LoadShedderBuilder::without_limit`], with the defaults, [`LimitOptions::default`],
    /// but for `sojourn`: the runtime's lag is no request's own wait, so it refuses nothing by
    /// itself).
    pub fn limit(mut self, options: LimitOptions) -> Self {
        self.limit = Some(options);
        self
    }

    /// No limit of the process's own: shed by the fleet's level alone.
    pub fn without_limit(mut self) -> Self {
        self.limit = None;
        self
    }

    /// The clock of the limit, the signals and the reports' time to live (a monotonic one
    /// by default; the tests move their own).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The shedder. It reports once [`LoadShedder::start`]ed (the layer starts it at its
    /// first request).
    ///
    /// # Errors
    ///
    /// An empty service key, an instance name the module refuses (1 to 64 letters, digits,
    /// `_ - . :`), a zero interval or time to live, or limit options
    /// ([`LimitOptions::validate`]) the limit cannot work with.
    pub fn build(self) -> Result<Arc<LoadShedder<C>>, InvalidArgument> {
        let bad = |what: String| Err(InvalidArgument(what));
        if self.service.is_empty() {
            return bad("the service's key is a non-empty string".into());
        }
        let instance = self.instance.unwrap_or_else(default_instance);
        let allowed = |c: char| c.is_ascii_alphanumeric() || "_-.:".contains(c);
        if instance.is_empty() || instance.len() > 64 || !instance.chars().all(allowed) {
            return bad(format!(
                "an instance is 1 to 64 letters, digits, _ - . or :, not {instance:?}"
            ));
        }
        if self.interval.is_zero() || self.ttl.is_some_and(|ttl| ttl.is_zero()) {
            return bad("the interval and the time to live are positive durations".into());
        }
        if let Some(limit) = &self.limit {
            limit.validate()?;
        }
        let seed = (self.clock)().as_nanos() as u64 | 1;
        Ok(Arc::new(LoadShedder {
            limiter: self.limiter,
            service: self.service,
            instance,
            interval: self.interval,
            ttl: self.ttl.unwrap_or(self.interval * 3),
            shadow: self.shadow,
            factors: self.factors,
            local: Mutex::new(Local {
                limit: self.limit.map(ConcurrencyLimit::new),
                signals: Signals::new(10, self.clock.clone()),
            }),
            clock: self.clock,
            standing: Mutex::new((NOTHING_SHED, None)),
            started: AtomicBool::new(false),
            seed: AtomicU64::new(seed),
            lag: AtomicU64::new(0),
        }))
    }
}

impl<C> fmt::Debug for LoadShedder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadShedder")
            .field("service", &self.service)
            .field("instance", &self.instance)
            .field("interval", &self.interval)
            .field("ttl", &self.ttl)
            .field("shadow", &self.shadow)
            .field("limit", &self.limit())
            .finish_non_exhaustive()
    }
}

impl<C> LoadShedder<C> {
    /// A builder for the shedder of `service` (the key its instances report to), reporting
    /// through `limiter`.
    pub fn builder(
        limiter: Arc<AsyncRateLimiter<C>>,
        service: impl Into<String>,
    ) -> LoadShedderBuilder<C> {
        LoadShedderBuilder {
            limiter,
            service: service.into(),
            instance: None,
            interval: Duration::from_secs(1),
            ttl: None,
            shadow: false,
            factors: None,
            limit: Some(lag_limit_options()),
            clock: monotonic(),
        }
    }

    /// The service's key.
    pub fn service(&self) -> &str {
        &self.service
    }

    fn local(&self) -> MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(|p| p.into_inner())
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

    /// The process's own limit now (`None` when off).
    pub fn limit(&self) -> Option<LocalLimit> {
        let local = self.local();
        let limit = local.limit.as_ref()?;
        Some(LocalLimit {
            limit: limit.limit(),
            congested: limit.congested(),
            in_flight: limit.inflight(),
        })
    }

    /// The routes whose latencies the process's limit keeps apart, as their requests named
    /// them ([`LoadShedder::finished_route`]); empty without a limit.
    pub fn routes(&self) -> Vec<String> {
        let local = self.local();
        local.limit.as_ref().map_or_else(Vec::new, |limit| {
            limit.routes().into_iter().map(str::to_owned).collect()
        })
    }

    /// Whether a request of `priority` goes on: a [`Ticket`] (for [`LoadShedder::finished`])
    /// when both the service's level (the share it gives the class, at random) and the
    /// process's limit admit it; `None` when it is shed. In shadow mode always a ticket,
    /// counting what would be shed.
    pub fn admit(&self, priority: Priority) -> Option<Ticket> {
        let standing = self.standing();
        let by_level = self.draw() < standing.share(priority);
        let now = (self.clock)();
        let waited = Duration::from_micros(self.lag.load(Ordering::Relaxed));
        let mut local = self.local();
        let counted = by_level
            && local
                .limit
                .as_mut()
                .is_some_and(|limit| limit.admit_after(priority, now, waited));
        // What the level refused is shedding too: the limit counts it among its interval's
        // refusals.
        if let (false, Some(limit)) = (by_level, local.limit.as_mut()) {
            limit.shed_by_level(now);
        }
        let admitted = by_level && (counted || local.limit.is_none());
        let outcome = match (admitted, self.shadow, by_level) {
            (true, _, _) => "admitted",
            (false, true, _) => "shadow",
            (false, false, true) => "shed_local",
            (false, false, false) => "shed",
        };
        if admitted || self.shadow {
            local.signals.started();
        }
        drop(local);
        metrics::counter!(
            "ratelimit_load_decisions_total",
            "service" => self.service.clone(),
            "priority" => priority.as_str(),
            "outcome" => outcome
        )
        .increment(1);
        if outcome == "shadow" {
            tracing::info!(
                service = %self.service,
                priority = %priority,
                level = standing.level,
                by_level = !by_level,
                "ratelimit: shadow: a request would be shed"
            );
        }
        // Its latency counts from when it arrived: the runtime's lag before the layer.
        (admitted || self.shadow).then_some(Ticket {
            started: now.saturating_sub(waited),
            counted,
        })
    }

    /// The request [`LoadShedder::admit`] gave `ticket` ended with HTTP `status`. A 429 (a
    /// limit's refusal, whoever made it) says nothing of the service's health: the request
    /// only leaves the requests in flight.
    pub fn finished(&self, ticket: Ticket, status: u16) {
        self.ended(ticket, status, false, None);
    }

    /// [`LoadShedder::finished`] for a request of `route` (its method and path pattern),
    /// whose latency the process's limit keeps apart (the first 32 routes): an interval
    /// without a fast route's request (a health check's) then reads as no queue.
    pub fn finished_route(&self, ticket: Ticket, status: u16, route: &str) {
        self.ended(ticket, status, false, Some(route));
    }

    /// The request [`LoadShedder::admit`] gave `ticket` ended with the rate limiter's own
    /// answer, not the service's: a refusal, or what its failure policy answers while the
    /// server fails. It leaves the requests in flight and says nothing of the service's health
    /// (counted, a server outage would read as the service failing and raise the level), nor
    /// its latency of the local limit's.
    pub fn finished_by_limiter(&self, ticket: Ticket) {
        self.ended(ticket, 503, true, None);
    }

    /// The request [`LoadShedder::admit`] gave `ticket` begins (`begins`) or ends a wait on the
    /// rate-limit server: it leaves the process's requests in flight meanwhile (a frozen
    /// server's timeout is not the service's concurrency; counted, a service whose requests
    /// wait on it refuses its other routes). Call it once as each wait begins and once as it
    /// ends, before the request finishes; the load-shedding layer does, for the rate-limiting
    /// layer inside it.
    pub fn waiting(&self, ticket: &Ticket, begins: bool) {
        if !ticket.counted {
            return;
        }
        let now = (self.clock)();
        if let Some(limit) = self.local().limit.as_mut() {
            if begins {
                limit.leave(now);
            } else {
                limit.back(now);
            }
        }
    }

    fn ended(&self, ticket: Ticket, status: u16, by_limiter: bool, route: Option<&str>) {
        let now = (self.clock)();
        let latency = now.saturating_sub(ticket.started);
        let mut local = self.local();
        let busy = match local.limit.as_mut() {
            Some(limit) => {
                // The limiter's own answer took the server's time (a failed call's timeout),
                // or none, not the service's: the limit counts no latency of it.
                if ticket.counted && by_limiter {
                    limit.leave(now);
                } else if ticket.counted {
                    match route {
                        Some(route) => limit.finish_route(route, latency, now),
                        None => limit.finish(latency, now),
                    }
                }
                limit.congested()
            }
            None => false,
        };
        if counts_for_service(status, by_limiter) {
            local.signals.done(latency, status, busy, route);
        } else {
            local.signals.left();
        }
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

impl<C> LoadShedder<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Reports now: the standing the server answered, or `None` when it failed (the last
    /// one holds until its time to live ends).
    pub async fn report(&self) -> Option<LoadStanding> {
        let mut factors = self.local().signals.sample();
        if let Some(own) = &self.factors {
            factors.extend(own());
        }
        let words = report_words(&self.service, &self.instance, self.ttl, &factors);
        let failed = match self.limiter.call(&words).await {
            Ok(reply) => match LoadStanding::from_reply(&reply) {
                Ok(standing) => {
                    *self.standing.lock().unwrap_or_else(|p| p.into_inner()) =
                        (standing, Some((self.clock)()));
                    metrics::gauge!("ratelimit_load_level", "service" => self.service.clone())
                        .set(standing.level as f64);
                    return Some(standing);
                }
                Err(error) => error.to_string(),
            },
            Err(error) => error.to_string(),
        };
        tracing::warn!(service = %self.service, error = %failed, "ratelimit: the load report failed");
        None
    }

    /// Reports every interval, on a task of its own, while the shedder is alive; once,
    /// whoever calls it first (the layer calls it at its first request). Another task
    /// measures how far behind the runtime runs (every 5 ms): a request waits for a worker
    /// before the layer sees it, so its wait counts in its latency and, as that much work
    /// ahead of it, in the requests the limit counts.
    pub fn start(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let watched = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let due = std::time::Instant::now() + LAG_TICK;
                tokio::time::sleep(LAG_TICK).await;
                let Some(shedder) = watched.upgrade() else {
                    return;
                };
                let late = std::time::Instant::now().saturating_duration_since(due);
                let lag = late.saturating_sub(TIMER_SLACK).as_micros();
                shedder
                    .lag
                    .store(u64::try_from(lag).unwrap_or(u64::MAX), Ordering::Relaxed);
            }
        });
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
}
