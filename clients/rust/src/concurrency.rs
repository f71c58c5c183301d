//! The instance's own limit on requests in flight, decided at admission with no server call
//! (docs/load.md, "The local limit"). It follows measured latency: it cuts when a standing
//! queue forms (CoDel's test: an interval whose *fastest* request still waited), grows back
//! while none does, and while congested reserves its top places for the more important
//! classes (trunk reservation). The same algorithm, step for step, as the Python, Node, Lua,
//! Java and Go packages' (`clients/conformance.json`, part `concurrency`).
//!
//! - **Standing queue**: an interval (100 ms) whose fastest request took longer than the
//!   no-load latency plus the longer of one no-load latency and 5 ms, while the requests in
//!   flight reached half the limit (at any peak while congested).
//! - **Routes**: a request may name its route ([`ConcurrencyLimit::finish_route`]; the tower
//!   layer gives its method and path), and each route's no-load latency is kept apart (the
//!   first 32 routes; the others with those that name none; a route with no request for two
//!   epochs leaves its place). The interval is read by the route of least no-load latency that
//!   finished a request in it (of those past their cold start, if any is), its fastest request
//!   against its own target: an interval without a fast route's request (a health check's) is
//!   no queue.
//! - **No-load latency** (a route's, and the service's over every request, which converts a
//!   request's wait): the least latency of the current and the previous epoch (30 s) that
//!   four intervals in a row (of those that finished a request) took at least; until three
//!   such intervals have ended, also the least any request took (a cold start's); while
//!   congested, after four intervals in a row whose fastest request took longer than every
//!   request of the peak ahead of it at the target each (no queue here explains that: a
//!   dependency got slower), what the fastest took.
//! - **Congestion** begins at the fourth standing interval in a row, or at once when the
//!   fastest request took over four times the target: the limit is cut to the in-flight peak
//!   times `target / fastest` (from 0.2 to 0.9), and again at every standing interval while
//!   congested; between them it grows by one, unless over a tenth of the interval's
//!   requests took longer than the target while the service never went idle (the limit is
//!   what it holds, a pool's size). It ends at the fourth interval in a row (of those
//!   that decided a request) whose peak stayed under half the limit and which refused
//!   fewer requests than it admitted (shedding keeps the queue short while the overload
//!   goes on, and one such interval is its arrivals coming and going); an interval under half
//!   the limit that refused as many as it admitted grows it by its square root, so that a
//!   load the shares alone hold back finds room.
//! - **Not congested**, the limit grows by its square root when the peak reached half of it,
//!   and otherwise eases down 5% an interval towards twice the peak.
//! - **Priorities**: while congested, a class is admitted only while the requests in flight
//!   are under its share of the limit (1, 0.6, 0.4, 0.2 from `critical_plus` to
//!   `sheddable`); not congested, every class is admitted under the limit or the initial
//!   limit, whichever is higher (a burst a fresh service admits, an idle one admits too).
//! - **A request the package answered itself** (a refusal, a failure policy's answer while
//!   the server fails) leaves the requests in flight without its latency
//!   ([`ConcurrencyLimit::leave`]).
//! - **A request's own wait** (CoDel's sojourn, per request): while congested, a request
//!   below the top class that waited longer than its share of the target before it could be
//!   decided is refused, however few are in flight. What the wait refuses is a queue, not the
//!   shares: it does not make the limit probe for room.

use std::time::Duration;

use crate::protocol::{InvalidArgument, Priority};

/// How many intervals in a row (of those that finished a request) must have taken a latency for
/// it to be the no-load latency.
const CONFIRMING: usize = 4;

/// How many calm intervals in a row (of those that decided a request) end congestion: one is
/// an overload's arrivals coming and going.
const CALM_INTERVALS_TO_END: u32 = 4;

/// The most routes whose latencies are kept apart; a request of any other route is counted
/// with those that name none.
const ROUTES: usize = 32;

/// The no-load latency of one route (or of the whole service), in µs: the least of the current
/// and the previous epoch that CONFIRMING intervals in a row (of those that finished one of its
/// requests) took at least; until CONFIRMING - 1 such intervals have ended, also the least any
/// request took (a cold start's).
#[derive(Clone, Debug, Default)]
struct Latencies {
    noload_now: Option<u64>,
    noload_before: Option<u64>,
    /// The fastest request of each of the last intervals that finished any, oldest first.
    recent_fastest: [Option<u64>; CONFIRMING - 1],
    /// The fastest request of the current interval.
    window_min: Option<u64>,
}

impl Latencies {
    fn noload(&self) -> Option<u64> {
        match (self.noload_now, self.noload_before) {
            (Some(now), Some(before)) => Some(now.min(before)),
            (one, other) => one.or(other),
        }
    }

    /// Whether CONFIRMING - 1 intervals have finished a request: past the cold start.
    fn confirmed(&self) -> bool {
        self.recent_fastest[0].is_some()
    }

    /// Lowers this epoch's no-load latency to `latency`, if that is less.
    fn lower_noload(&mut self, latency: u64) {
        self.noload_now = Some(self.noload_now.map_or(latency, |least| least.min(latency)));
    }

    fn finished(&mut self, latency: u64) {
        self.window_min = Some(
            self.window_min
                .map_or(latency, |fastest| fastest.min(latency)),
        );
        if !self.confirmed() {
            self.lower_noload(latency);
        }
    }

    /// The interval ended: its fastest lowers the no-load latency as far as the intervals
    /// before it agree (a fast request now and then is not what the others take).
    fn close_interval(&mut self) {
        if let Some(fastest) = self.window_min.take() {
            let agreed = self
                .recent_fastest
                .iter()
                .try_fold(fastest, |slowest, recent| {
                    recent.map(|one| slowest.max(one))
                });
            if let Some(agreed) = agreed {
                self.lower_noload(agreed);
            }
            self.recent_fastest.rotate_left(1);
            self.recent_fastest[CONFIRMING - 2] = Some(fastest);
        }
    }

    fn next_epoch(&mut self) {
        self.noload_before = self.noload_now.take();
    }
}

/// The local limit's parameters. [`LimitOptions::default`] is what every package ships.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitOptions {
    /// The limit before any measurement, and while not congested the least that admits (20).
    pub initial: f64,
    /// The least the limit is cut to (4).
    pub floor: f64,
    /// The most it grows to (1,000).
    pub ceiling: f64,
    /// How long an interval lasts (100 ms).
    pub interval: Duration,
    /// The least queueing delay that counts as standing (5 ms).
    pub target: Duration,
    /// Standing intervals in a row that begin congestion (4).
    pub enter: u32,
    /// How many times the target a fastest request must take to begin it at once (4).
    pub deep: f64,
    /// How long the no-load latency is kept (30 s, the current and the last epoch).
    pub epoch: Duration,
    /// How far the limit eases down an interval, not congested (0.95).
    pub decay: f64,
    /// The share of the limit each class may fill while congested, most important first.
    pub shares: [f64; 4],
    /// While congested, a request below the top class is refused once its wait passes this
    /// many times its share of the target (1; infinite: never, for a wait known only as a
    /// bound).
    pub sojourn: f64,
}

impl LimitOptions {
    /// Whether the limit can work with them: finite numbers, `1 <= floor <= initial <=
    /// ceiling`, positive interval and epoch, `enter` and `deep` at least 1 (`deep` infinite:
    /// congestion never begins at once), `decay` in (0, 1], `sojourn` positive (infinite: a
    /// request's wait refuses nothing by itself), and shares from 0 to 1 that never grow from
    /// a class to a less important one.
    pub fn validate(&self) -> Result<(), InvalidArgument> {
        let bad = |what: String| Err(InvalidArgument(what));
        let numbers = [self.initial, self.floor, self.ceiling, self.decay];
        if numbers.iter().chain(&self.shares).any(|n| !n.is_finite()) {
            return bad(format!("the limit's options are finite numbers: {self:?}"));
        }
        let ordered =
            1.0 <= self.floor && self.floor <= self.initial && self.initial <= self.ceiling;
        if !ordered {
            return bad(format!(
                "the limit's options need 1 <= floor <= initial <= ceiling, not {}, {}, {}",
                self.floor, self.initial, self.ceiling
            ));
        }
        if self.interval.is_zero() || self.epoch.is_zero() {
            return bad("the limit's interval and epoch are positive durations".into());
        }
        let deep_enough = self.deep >= 1.0; // NaN is not
        if self.enter < 1 || !deep_enough {
            return bad(format!(
                "the limit's enter and deep are at least 1, not {} and {}",
                self.enter, self.deep
            ));
        }
        let waits = self.sojourn > 0.0; // NaN is not
        if !waits {
            return bad(format!(
                "the limit's sojourn is positive, not {}",
                self.sojourn
            ));
        }
        let decays = self.decay > 0.0 && self.decay <= 1.0;
        if !decays {
            return bad(format!(
                "the limit's decay is in (0, 1], not {}",
                self.decay
            ));
        }
        let in_range = self.shares.iter().all(|share| (0.0..=1.0).contains(share));
        if !in_range || self.shares.windows(2).any(|pair| pair[1] > pair[0]) {
            return bad(format!(
                "the limit's shares are 0 to 1, most important first and never growing: {:?}",
                self.shares
            ));
        }
        Ok(())
    }
}

impl Default for LimitOptions {
    fn default() -> Self {
        LimitOptions {
            initial: 20.0,
            floor: 4.0,
            ceiling: 1_000.0,
            interval: Duration::from_millis(100),
            target: Duration::from_millis(5),
            enter: 4,
            deep: 4.0,
            epoch: Duration::from_secs(30),
            decay: 0.95,
            shares: [1.0, 0.6, 0.4, 0.2],
            sojourn: 1.0,
        }
    }
}

/// Whole microseconds: every package compares times exactly.
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The local limit: see the module's documentation. Plain state, no I/O: the time of each
/// event is passed in, as an offset of a monotonic clock ([`crate::Clock`]).
#[derive(Clone, Debug)]
pub struct ConcurrencyLimit {
    options: LimitOptions,
    limit: f64,
    inflight: u64,
    congested: bool,
    changes: u64,
    congestions: u64,
    window_end: Option<u64>,
    /// The most requests in flight or waiting an admission saw in the interval.
    peak: f64,
    /// The interval's admitted and refused requests, and of those refused, how many for
    /// their own wait.
    admitted: u64,
    refused: u64,
    waited_out: u64,
    /// Of the refused, how many the service's level refused (not this limit's shares).
    by_level: u64,
    /// Whether the limit refused a request while not congested: the requests in flight
    /// reached it (or the initial limit).
    full: bool,
    /// The interval's finished requests, and how many of them took longer than the target.
    finished: u64,
    queued: u64,
    /// The fewest requests in flight or waiting the interval saw.
    trough: f64,
    /// The requests left waiting when the last request finished, where the package counts
    /// them ([`ConcurrencyLimit::finish_behind`]).
    behind: f64,
    standing_run: u32,
    /// While congested, intervals in a row (of those that decided a request) that ended with
    /// the peak under half the limit and fewer refused than admitted.
    calm_run: u32,
    /// Intervals in a row whose latency no queue here explains.
    unexplained: u32,
    /// Every request's latencies (what admission converts a wait with).
    service: Latencies,
    /// Each route's (what the standing-queue test reads: a route's fastest against its own
    /// target); the requests that name none, or a route past the first ROUTES, under `None`,
    /// first.
    routes: Vec<(Option<String>, Latencies)>,
    epoch_end: u64,
}

impl Default for ConcurrencyLimit {
    fn default() -> Self {
        ConcurrencyLimit::new(LimitOptions::default())
    }
}

impl ConcurrencyLimit {
    /// A limit with `options`.
    pub fn new(options: LimitOptions) -> Self {
        ConcurrencyLimit {
            limit: options.initial,
            options,
            inflight: 0,
            congested: false,
            changes: 0,
            congestions: 0,
            window_end: None,
            peak: 0.0,
            admitted: 0,
            refused: 0,
            waited_out: 0,
            by_level: 0,
            full: false,
            finished: 0,
            queued: 0,
            trough: 0.0,
            behind: 0.0,
            standing_run: 0,
            calm_run: 0,
            unexplained: 0,
            service: Latencies::default(),
            routes: vec![(None, Latencies::default())],
            epoch_end: 0,
        }
    }

    /// The limit now.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// The requests admitted and not finished.
    pub fn inflight(&self) -> u64 {
        self.inflight
    }

    /// Whether a standing queue was found and has not cleared.
    pub fn congested(&self) -> bool {
        self.congested
    }

    /// How many times the limit changed.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// How many times congestion began.
    pub fn congestions(&self) -> u64 {
        self.congestions
    }

    /// The service's no-load latency, over every route: the least of this epoch and the last,
    /// once measured.
    pub fn noload(&self) -> Option<Duration> {
        self.noload_us().map(Duration::from_micros)
    }

    fn noload_us(&self) -> Option<u64> {
        self.service.noload()
    }

    /// The routes whose latencies are kept apart, as their requests named them.
    pub fn routes(&self) -> Vec<&str> {
        self.routes
            .iter()
            .filter_map(|(route, _)| route.as_deref())
            .collect()
    }

    /// The route whose fastest request of the interval reads it, as (its fastest, its
    /// no-load latency): of the routes that finished a request in it with a no-load latency
    /// known (past their cold start, if any is), the fastest by nature (then by its fastest,
    /// so that the order never matters); `None` if no route did.
    fn judging_route(&self) -> Option<(u64, u64)> {
        let measured = self
            .routes
            .iter()
            .filter_map(|(_, route)| Some((route.confirmed(), route.window_min?, route.noload()?)));
        let any_confirmed = measured.clone().any(|(confirmed, _, _)| confirmed);
        measured
            .filter(|&(confirmed, _, _)| confirmed || !any_confirmed)
            .map(|(_, fastest, noload)| (noload, fastest))
            .min()
            .map(|(noload, fastest)| (fastest, noload))
    }

    /// The latency a request may take without a queue standing (µs): the no-load latency plus
    /// the longer of one more and the target (a burst's queue), or, while congested, plus the
    /// target alone (CoDel's), so that the queue kept while shedding stays short where
    /// requests are slow by nature, behind a pool of a few slots.
    fn target_us(&self, noload: u64) -> u64 {
        let target = micros(self.options.target);
        let queue = if self.congested {
            target
        } else {
            noload.max(target)
        };
        noload + queue
    }

    /// Closes the interval that ended at or before `now`, if any.
    fn roll(&mut self, now: u64) {
        let interval = micros(self.options.interval);
        let epoch = micros(self.options.epoch).max(1);
        let Some(window_end) = self.window_end else {
            self.window_end = Some(now.saturating_add(interval));
            self.epoch_end = now.saturating_add(epoch);
            return;
        };
        while now >= self.epoch_end {
            self.service.next_epoch();
            for (_, route) in &mut self.routes {
                route.next_epoch();
            }
            // A route with no request for two epochs leaves its place to another.
            self.routes
                .retain(|(name, route)| name.is_none() || route.noload().is_some());
            self.epoch_end = self.epoch_end.saturating_add(epoch);
        }
        if now < window_end {
            return;
        }
        let bound = self.peak >= self.limit / 2.0;
        // The interval is read by the fastest route that finished a request in it (of those
        // past their cold start, if any is): a queue delays every route's requests, and the
        // fastest route's show the least of one; a route's fastest is set against its own
        // target, so that an interval without a fast route's request (a health check's) is no
        // queue.
        let measured = self
            .judging_route()
            .map(|(fastest, noload)| (fastest, self.target_us(noload)));
        let o = &self.options;
        // While congested, a queue stands whatever the peak: the probe may raise the limit past it.
        let mut standing =
            (bound || self.congested) && measured.is_some_and(|(fastest, target)| fastest > target);
        // While congested, a fastest request slower than every request of the peak ahead of it
        // at the target each: no queue here explains it, the service itself got slower (a
        // dependency). After `enter` such intervals the no-load latency is what it takes now.
        let unexplained = standing
            && self.congested
            && measured.is_some_and(|(fastest, target)| {
                fastest as f64 > self.peak.max(1.0) * target as f64
            });
        self.unexplained = if unexplained { self.unexplained + 1 } else { 0 };
        if self.unexplained >= o.enter {
            let routes = self.routes.iter_mut().map(|(_, route)| route);
            for latencies in std::iter::once(&mut self.service).chain(routes) {
                if latencies.window_min.is_some() {
                    latencies.noload_now = latencies.window_min;
                    latencies.noload_before = latencies.window_min;
                }
            }
            self.unexplained = 0;
            standing = false;
        }
        self.standing_run = if standing { self.standing_run + 1 } else { 0 };
        let before = self.limit;
        let mut calm = false;
        // A queue that stands while the limit, not congested, is full is an overload already:
        // a burst a healthy service holds neither fills it nor stands.
        let at_once = standing
            && (self.full
                || measured
                    .is_some_and(|(fastest, target)| fastest as f64 > o.deep * target as f64));
        let cut = measured
            .filter(|_| standing && (self.congested || at_once || self.standing_run >= o.enter));
        if let Some((fastest, target)) = cut {
            let gradient = (target as f64 / fastest as f64).clamp(0.2, 0.9);
            self.limit = o.floor.max(self.limit.min(self.peak) * gradient);
            if !self.congested {
                self.congestions += 1;
            }
            self.congested = true;
        } else if standing {
            // Not yet: a queue must stand for `enter` intervals, be deep, or fill the limit.
        } else if bound && measured.is_some() {
            if !self.congested {
                self.limit = o.ceiling.min(self.limit + self.limit.sqrt());
            } else if self.queued * 10 <= self.finished || self.trough == 0.0 {
                // Congested, it grows by one, unless a queue came and went at this limit (over
                // a tenth of the requests took longer than the target) while the service never
                // went idle: the limit is what it can hold (a pool's size), and probing past it
                // is a queue.
                self.limit = o.ceiling.min(self.limit + 1.0);
            }
        } else if !bound {
            if self.congested {
                // Shedding keeps the queue short: what it refused is the overload going on.
                // One calm interval is no end (an overload's arrivals come and go).
                if self.refused < self.admitted {
                    calm = true;
                    if self.calm_run + 1 >= CALM_INTERVALS_TO_END {
                        self.congested = false;
                    }
                } else if self.refused - self.waited_out - self.by_level >= self.admitted {
                    // Refusing by the shares alone, under half the limit: room is probed for
                    // as headroom, so that a load the shares hold back cannot keep it (what a
                    // request's own wait refused is a queue, not the shares).
                    self.limit = o.ceiling.min(self.limit + self.limit.sqrt());
                }
            } else {
                self.limit = o.floor.max(2.0 * self.peak).max(self.limit * o.decay);
            }
        }
        if calm {
            self.calm_run = if self.congested { self.calm_run + 1 } else { 0 };
        } else if self.admitted > 0 || self.refused > 0 {
            // An interval that decided nothing neither continues a calm run nor breaks it.
            self.calm_run = 0;
        }
        if self.limit != before {
            self.changes += 1;
        }
        self.service.close_interval();
        for (_, route) in &mut self.routes {
            route.close_interval();
        }
        self.peak = self.inflight as f64;
        self.trough = self.inflight as f64 + self.behind;
        self.finished = 0;
        self.queued = 0;
        self.admitted = 0;
        self.refused = 0;
        self.waited_out = 0;
        self.by_level = 0;
        self.full = false;
        self.window_end = Some(now.saturating_add(interval));
    }

    /// Whether a request of `priority` is admitted at `now`; an admitted one is in flight
    /// until [`ConcurrencyLimit::finish`].
    pub fn admit(&mut self, priority: Priority, now: Duration) -> bool {
        self.admit_after(priority, now, Duration::ZERO)
    }

    /// [`ConcurrencyLimit::admit`] for a request that waited `backlog` before it could be
    /// decided (an event loop's lag): the work ahead of it, counted as that many no-load
    /// latencies' worth of requests in flight (for every class but the top one), and, while
    /// congested, its own wait, refused past its share of the target.
    pub fn admit_after(&mut self, priority: Priority, now: Duration, backlog: Duration) -> bool {
        self.roll(micros(now));
        let backlog = micros(backlog);
        let noload = self.noload_us().filter(|_| backlog > 0);
        let waiting = noload.map_or(0.0, |noload| backlog as f64 / noload as f64);
        let load = self.inflight as f64 + waiting;
        let index = priority.index();
        let share = self.options.shares[index];
        // The top class counts only what is in flight: the backlog is a guess of the queue
        // (the time since the loop was last idle), and its places are kept.
        let counted = if index == 0 {
            self.inflight as f64
        } else {
            load
        };
        let mut waited_out = false;
        // The backlog refuses only while congested: a burst's wait is no standing queue.
        let admitted = if self.congested {
            let within = counted < self.limit * share;
            if let Some(noload) = noload.filter(|_| within && index > 0) {
                let allowed = self.options.sojourn * share * self.target_us(noload) as f64;
                waited_out = backlog as f64 >= allowed;
            }
            within && !waited_out
        } else {
            // Not congested, the initial limit admits too: the limit eased down is what the
            // standing-queue test reads, and a burst that a fresh service admits, an idle one
            // admits as well.
            let admitted = (self.inflight as f64) < self.limit.max(self.options.initial);
            self.full |= !admitted;
            admitted
        };
        // The peak is what the limit counted the request against: for the top class, what is
        // in flight alone, so that a loop kept busy by the top class (a readiness probe's, a
        // load test's), whose backlog is a guess, reads as no queue to cut.
        if admitted {
            self.inflight += 1;
            self.admitted += 1;
            self.peak = self.peak.max(counted + 1.0);
            true
        } else {
            self.peak = self.peak.max(counted);
            self.refused += 1;
            self.waited_out += u64::from(waited_out);
            false
        }
    }

    /// An admitted request that names no route ended at `now` after `latency`.
    pub fn finish(&mut self, latency: Duration, now: Duration) {
        self.finish_behind(None, latency, now, Duration::ZERO);
    }

    /// An admitted request of `route` (its method and path pattern) ended at `now` after
    /// `latency`: its latency is also kept apart, with its route's (the first 32 routes).
    pub fn finish_route(&mut self, route: &str, latency: Duration, now: Duration) {
        self.finish_behind(Some(route), latency, now, Duration::ZERO);
    }

    /// An admitted request of `route` (or none) ended at `now` after `latency`, leaving
    /// `backlog` of work waiting for the service, where the package counts it (a run queue's):
    /// the service is not idle while it waits, though no request is in flight.
    pub fn finish_behind(
        &mut self,
        route: Option<&str>,
        latency: Duration,
        now: Duration,
        backlog: Duration,
    ) {
        self.roll(micros(now));
        self.inflight = self.inflight.saturating_sub(1);
        let backlog = micros(backlog);
        self.behind = match self.noload_us().filter(|_| backlog > 0) {
            Some(noload) => backlog as f64 / noload as f64,
            None => 0.0,
        };
        self.trough = self.trough.min(self.inflight as f64 + self.behind);
        let latency = micros(latency);
        self.service.finished(latency);
        let index = self.route_index(route);
        let latencies = &mut self.routes[index].1;
        latencies.finished(latency);
        let noload = latencies.noload().unwrap_or(latency);
        self.finished += 1;
        self.queued += u64::from(latency > self.target_us(noload));
    }

    /// Where `route`'s latencies are kept: apart for the first ROUTES routes named, else with
    /// the unnamed ones (first).
    fn route_index(&mut self, route: Option<&str>) -> usize {
        let Some(route) = route else { return 0 };
        if let Some(index) = self
            .routes
            .iter()
            .position(|(name, _)| name.as_deref() == Some(route))
        {
            return index;
        }
        if self.routes.len() > ROUTES {
            return 0;
        }
        self.routes
            .push((Some(route.to_owned()), Latencies::default()));
        self.routes.len() - 1
    }

    /// A request the service's level refused at `now` before this limit decided it: one more
    /// refusal of the interval, as shedding's own (the overload goes on while anything is
    /// refused: the level's refusals keep congestion from ending when they leave this limit
    /// only a trickle to decide), never in flight.
    pub fn shed_by_level(&mut self, now: Duration) {
        self.roll(micros(now));
        self.refused += 1;
        self.by_level += 1;
    }

    /// An admitted request ended at `now` with an answer that says nothing of the service's
    /// latency (the package's own: a refusal, a failure policy's answer while the server
    /// failed), or began to wait on the rate-limit server (until [`back`](Self::back)): it
    /// leaves the requests in flight, and no latency is counted.
    pub fn leave(&mut self, now: Duration) {
        self.roll(micros(now));
        self.inflight = self.inflight.saturating_sub(1);
        self.trough = self.trough.min(self.inflight as f64);
    }

    /// A request that left the requests in flight ([`leave`](Self::leave)) while it waited on
    /// the rate-limit server got its answer, or gave up on it, at `now`: it is in flight again,
    /// whatever the limit (it was admitted). A frozen server's timeout is not the service's
    /// concurrency: counted, a service whose requests wait on it refuses its other routes.
    pub fn back(&mut self, now: Duration) {
        self.roll(micros(now));
        self.inflight += 1;
        self.peak = self.peak.max(self.inflight as f64);
    }
}
