//! What a process measures of itself between two load reports, with no code from the user,
//! as the Python and Node packages do: the CPU and memory of its cgroup (or of the process and
//! the host), the host's load, the requests in flight, their latency and 5xx share over the
//! interval, and over a recent window the requests and their successes (`admission`) and,
//! from the busy seconds only, the most requests completed in a second and the latency of
//! their mix of requests with no queue (`bbr`): a second when the process was not busy measured
//! the demand, not the capacity.
//! Linux's `/proc` and cgroup v2 files; elsewhere those factors are left out.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::resilience::Clock;

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// CPU seconds this process used: the first field of `/proc/self/schedstat` (nanoseconds
/// on a CPU).
fn process_cpu() -> Option<Duration> {
    let text = read(Path::new("/proc/self/schedstat"))?;
    let nanos = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// The CPU in use since the last reading, 0 to 1 of what the process may use: in a
/// container with a CPU quota (cgroup v2 `cpu.max`), the cgroup's use over its quota;
/// otherwise the process's over the cores it may run on (a Rust service runs on all of
/// them, not on one as a Python or Node process does).
pub struct CpuMeter {
    cgroup: PathBuf,
    clock: Clock,
    cores: f64,
    last: Option<(Duration, Duration, bool)>,
}

impl CpuMeter {
    /// A meter of the cgroup at `cgroup` (`/sys/fs/cgroup` in a container) or the process.
    pub fn new(cgroup: impl Into<PathBuf>, clock: Clock) -> CpuMeter {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        CpuMeter {
            cgroup: cgroup.into(),
            clock,
            cores: cores as f64,
            last: None,
        }
    }

    /// The cgroup's quota in cores, when it has one.
    fn quota(&self) -> Option<f64> {
        let text = read(&self.cgroup.join("cpu.max"))?;
        let mut parts = text.split_whitespace();
        let (limit, period) = (parts.next()?, parts.next()?);
        let (limit, period): (f64, f64) = (limit.parse().ok()?, period.parse().ok()?);
        (period > 0.0).then(|| (limit / period).max(0.01))
    }

    fn used(&self, quota: bool) -> Option<Duration> {
        if !quota {
            return process_cpu();
        }
        let stat = read(&self.cgroup.join("cpu.stat"))?;
        let line = stat.lines().find(|line| line.starts_with("usage_usec "))?;
        Some(Duration::from_micros(line[11..].trim().parse().ok()?))
    }

    /// The share of CPU used since the last reading; `None` at the first.
    pub fn read(&mut self) -> Option<f64> {
        let quota = self.quota();
        let now = (self.clock)();
        let used = self.used(quota.is_some());
        let last = self.last.take();
        self.last = used.map(|used| (now, used, quota.is_some()));
        let (at, before, had_quota) = last?;
        let used = used?;
        // A quota set or lifted since changes what is counted: a new baseline.
        if now <= at || had_quota != quota.is_some() {
            return None;
        }
        let spent = used.saturating_sub(before).as_secs_f64();
        let capacity = (now - at).as_secs_f64() * quota.unwrap_or(self.cores);
        Some((spent / capacity).clamp(0.0, 1.0))
    }
}

/// Memory in use over what is allowed, 0 to 1: the cgroup's (`memory.current` over
/// `memory.max`), else the host's (`MemTotal - MemAvailable` over `MemTotal`).
pub fn memory_share(cgroup: &Path, meminfo: &Path) -> Option<f64> {
    let current = read(&cgroup.join("memory.current"));
    let limit = read(&cgroup.join("memory.max"));
    if let (Some(current), Some(limit)) = (current, limit) {
        if let (Ok(current), Ok(limit)) =
            (current.trim().parse::<f64>(), limit.trim().parse::<f64>())
        {
            return Some((current / limit.max(1.0)).clamp(0.0, 1.0));
        }
    }
    let info = read(meminfo)?;
    let field = |name: &str| -> Option<f64> {
        let line = info.lines().find(|line| line.starts_with(name))?;
        line[name.len()..].split_whitespace().next()?.parse().ok()
    };
    let (total, available) = (field("MemTotal:")?, field("MemAvailable:")?);
    (total > 0.0).then(|| ((total - available) / total).clamp(0.0, 1.0))
}

/// Whether a response with HTTP `status` says anything about the service: not a limit's
/// refusal (429, whoever made it), and not a 5xx the rate limiter made by its policy
/// (`by_limiter`: its failure policy's answer, a load gate's shed).
pub fn counts_for_service(status: u16, by_limiter: bool) -> bool {
    status != 429 && !(by_limiter && status >= 500)
}

/// The host's run queue over its cores (load1 / cores, Sentinel's system load).
pub fn host_load() -> Option<f64> {
    let text = read(Path::new("/proc/loadavg"))?;
    let load1: f64 = text.split_whitespace().next()?.parse().ok()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some(load1 / cores as f64)
}

/// How many routes a second keeps apart for `min_rt`; past them, the others share one entry.
const ROUTES_KEPT: usize = 32;

/// A route as the busy seconds' routes are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum RouteKey<'a> {
    Named(&'a str),
    Unnamed,
    /// The routes past [`ROUTES_KEPT`], together.
    Others,
}

/// A route's requests completed in a second, and the least latency of them.
#[derive(Clone, Copy, Debug)]
struct RouteSecond {
    completed: u64,
    fastest: Duration,
}

impl RouteSecond {
    /// One request that took `latency`.
    fn first(latency: Duration) -> RouteSecond {
        RouteSecond {
            completed: 1,
            fastest: latency,
        }
    }

    /// `other`'s requests too.
    fn merge(&mut self, other: RouteSecond) {
        self.completed += other.completed;
        self.fastest = self.fastest.min(other.fastest);
    }

    /// `other`'s requests into `entry`, which may hold none yet.
    fn merge_into(entry: &mut Option<RouteSecond>, other: RouteSecond) {
        match entry {
            Some(kept) => kept.merge(other),
            None => *entry = Some(other),
        }
    }
}

/// One second of the window.
#[derive(Clone, Debug)]
struct Second {
    second: u64,
    completed: u64,
    /// The first [`ROUTES_KEPT`] routes named, each apart.
    named: HashMap<String, RouteSecond>,
    /// The requests of no route named.
    unnamed: Option<RouteSecond>,
    /// The routes named past [`ROUTES_KEPT`], together.
    others: Option<RouteSecond>,
    requests: u64,
    successes: u64,
    /// The process's limit congested in it: only such a second counts towards `max_rps`
    /// and `min_rt`.
    busy: bool,
}

/// The requests a process serves, counted as they start and end, read once a report
/// interval ([`Signals::sample`]). Behind the shedder's lock.
pub struct Signals {
    window: u64,
    clock: Clock,
    cpu: CpuMeter,
    cgroup: PathBuf,
    inflight: u64,
    latencies: Duration,
    finished: u64,
    failed: u64,
    seconds: VecDeque<Second>,
}

impl Signals {
    /// Signals over a window of `window` seconds (10 in every package) of `clock`, reading
    /// the cgroup at `/sys/fs/cgroup`. The CPU is measured over the real clock, whatever
    /// `clock` says: it is a share of real time.
    pub fn new(window: u64, clock: Clock) -> Signals {
        let cgroup = PathBuf::from("/sys/fs/cgroup");
        let mut cpu = CpuMeter::new(cgroup.clone(), crate::resilience::monotonic());
        // The first reading is the baseline: taken now, the first report has a share.
        cpu.read();
        Signals {
            window: window.max(1),
            clock,
            cpu,
            cgroup,
            inflight: 0,
            latencies: Duration::ZERO,
            finished: 0,
            failed: 0,
            seconds: VecDeque::new(),
        }
    }

    fn second(&mut self, now: Duration) -> &mut Second {
        let second = now.as_secs();
        while self
            .seconds
            .front()
            .is_some_and(|first| first.second + self.window <= second)
        {
            self.seconds.pop_front();
        }
        match self.seconds.back() {
            Some(last) if last.second == second => {}
            _ => self.seconds.push_back(Second {
                second,
                completed: 0,
                named: HashMap::new(),
                unnamed: None,
                others: None,
                requests: 0,
                successes: 0,
                busy: false,
            }),
        }
        let last = self.seconds.len() - 1;
        &mut self.seconds[last]
    }

    /// A request began.
    pub fn started(&mut self) {
        self.inflight += 1;
    }

    /// A request ended with an answer that says nothing of the service (a limit's refusal,
    /// the failure policy's): it leaves the requests in flight, and nothing else counts it.
    pub fn left(&mut self) {
        self.inflight = self.inflight.saturating_sub(1);
    }

    /// A request ended after `latency` with HTTP `status` (5xx: failed); `busy` when the
    /// process's limit was congested; `route` names its route, whose least latency is kept
    /// apart (`min_rt`).
    pub fn done(&mut self, latency: Duration, status: u16, busy: bool, route: Option<&str>) {
        self.inflight = self.inflight.saturating_sub(1);
        self.latencies += latency;
        self.finished += 1;
        let failed = status >= 500;
        self.failed += u64::from(failed);
        let now = (self.clock)();
        let second = self.second(now);
        second.completed += 1;
        let request = RouteSecond::first(latency);
        match route {
            // A route seen this second already: no allocation.
            Some(name) => {
                if let Some(kept) = second.named.get_mut(name) {
                    kept.merge(request);
                } else if second.named.len() < ROUTES_KEPT {
                    second.named.insert(name.to_owned(), request);
                } else {
                    RouteSecond::merge_into(&mut second.others, request);
                }
            }
            None => RouteSecond::merge_into(&mut second.unnamed, request),
        }
        second.requests += 1;
        second.successes += u64::from(!failed);
        second.busy |= busy;
    }

    /// The factors to report now; the interval starts again.
    pub fn sample(&mut self) -> Vec<(String, f64)> {
        let mut factors = vec![("inflight".to_owned(), self.inflight as f64)];
        if let Some(cpu) = self.cpu.read() {
            factors.push(("cpu".into(), cpu));
        }
        if let Some(memory) = memory_share(&self.cgroup, Path::new("/proc/meminfo")) {
            factors.push(("memory".into(), memory));
        }
        if let Some(load) = host_load() {
            factors.push(("load".into(), load));
        }
        if self.finished > 0 {
            let mean = self.latencies.as_secs_f64() / self.finished as f64;
            factors.push(("latency".into(), mean * 1_000.0));
            factors.push(("errors".into(), self.failed as f64 / self.finished as f64));
        }
        let now = (self.clock)();
        self.second(now);
        let busy = self.seconds.iter().filter(|s| s.busy && s.completed > 0);
        if let Some(most) = busy.clone().map(|s| s.completed).max() {
            factors.push(("max_rps".into(), most as f64));
            factors.push(("min_rt".into(), no_load_latency(busy) * 1_000.0));
        }
        let requests: u64 = self.seconds.iter().map(|s| s.requests).sum();
        let successes: u64 = self.seconds.iter().map(|s| s.successes).sum();
        factors.push(("requests".into(), requests as f64));
        factors.push(("successes".into(), successes as f64));
        self.latencies = Duration::ZERO;
        self.finished = 0;
        self.failed = 0;
        factors
    }
}

/// The latency (s) of the busy seconds' mix of requests with no queue, BBR's min RTT: each
/// route's least latency over them (its no-load latency), weighted by how many requests it
/// completed in them. With one route, its least latency; with a fast health check beside slow
/// work, the work's, not the check's (the least latency of all would shrink the pipe to what the
/// check holds, and read a service at its capacity as many times over it).
fn no_load_latency<'a>(busy: impl Iterator<Item = &'a Second>) -> f64 {
    let mut routes: HashMap<RouteKey<'a>, RouteSecond> = HashMap::new();
    for second in busy {
        let named = (second.named.iter()).map(|(route, kept)| (RouteKey::Named(route), *kept));
        let unnamed = (second.unnamed).map(|kept| (RouteKey::Unnamed, kept));
        let others = (second.others).map(|kept| (RouteKey::Others, kept));
        for (route, kept) in named.chain(unnamed).chain(others) {
            (routes.entry(route))
                .and_modify(|total| total.merge(kept))
                .or_insert(kept);
        }
    }
    let completed: u64 = routes.values().map(|total| total.completed).sum();
    let weighted: f64 = (routes.values())
        .map(|total| total.completed as f64 * total.fastest.as_secs_f64())
        .sum();
    weighted / completed.max(1) as f64
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;

    fn clock() -> (Arc<AtomicU64>, Clock) {
        let millis = Arc::new(AtomicU64::new(0));
        let reading = millis.clone();
        let clock: Clock = Arc::new(move || Duration::from_millis(reading.load(Ordering::SeqCst)));
        (millis, clock)
    }

    fn value(factors: &[(String, f64)], name: &str) -> Option<f64> {
        factors.iter().find(|(f, _)| f == name).map(|(_, v)| *v)
    }

    #[test]
    fn requests_give_latency_errors_the_counts_and_only_busy_seconds_the_pipe() {
        let (millis, clock) = clock();
        let mut signals = Signals::new(10, clock);
        signals.started();
        signals.started();
        assert_eq!(value(&signals.sample(), "inflight"), Some(2.0));
        millis.store(10_200, Ordering::SeqCst);
        signals.done(Duration::from_millis(20), 200, false, None);
        signals.done(Duration::from_millis(60), 503, false, None);
        let sample = signals.sample();
        assert_eq!(value(&sample, "inflight"), Some(0.0));
        assert_eq!(value(&sample, "latency"), Some(40.0));
        assert_eq!(value(&sample, "errors"), Some(0.5));
        assert_eq!(value(&sample, "requests"), Some(2.0));
        assert_eq!(value(&sample, "successes"), Some(1.0));
        assert_eq!(value(&sample, "max_rps"), None, "no busy second");
        millis.store(11_500, Ordering::SeqCst);
        signals.started();
        signals.started();
        signals.done(Duration::from_millis(40), 200, true, None);
        signals.done(Duration::from_millis(30), 200, true, None);
        let sample = signals.sample();
        assert_eq!(value(&sample, "max_rps"), Some(2.0));
        assert_eq!(value(&sample, "min_rt"), Some(30.0));
        assert!(value(&sample, "latency").is_some());
        // The window keeps its seconds until they age out.
        millis.store(25_000, Ordering::SeqCst);
        let later = signals.sample();
        assert_eq!(value(&later, "requests"), Some(0.0));
        assert_eq!(value(&later, "latency"), None);
    }

    #[test]
    fn min_rt_is_the_no_load_latency_of_the_mix_not_of_its_fastest_route() {
        // A health check of 1 ms polled beside work of 30 ms or more: the pipe is what the
        // work holds. The least latency of all would read it as a thirtieth of that, and a
        // service at its capacity as thirty times over it (`bbr`).
        let (millis, clock) = clock();
        let mut signals = Signals::new(10, clock);
        millis.store(3_500, Ordering::SeqCst);
        signals.done(Duration::from_millis(1), 200, true, Some("GET /health"));
        for latency in [40, 30, 50] {
            signals.done(Duration::from_millis(latency), 200, true, Some("GET /work"));
        }
        millis.store(4_500, Ordering::SeqCst);
        signals.done(Duration::from_millis(35), 200, true, Some("GET /work"));
        let sample = signals.sample();
        assert_eq!(value(&sample, "max_rps"), Some(4.0));
        let want = (4.0 * 30.0 + 1.0) / 5.0;
        let min_rt = value(&sample, "min_rt").expect("busy seconds");
        assert!((min_rt - want).abs() < 1e-9, "{min_rt} against {want}");
        // A second not busy counts for neither.
        millis.store(5_500, Ordering::SeqCst);
        signals.done(Duration::from_micros(500), 200, false, Some("GET /health"));
        let min_rt = value(&signals.sample(), "min_rt").expect("busy seconds");
        assert!((min_rt - want).abs() < 1e-9, "{min_rt} against {want}");
    }

    #[test]
    fn a_second_keeps_so_many_routes_apart_and_the_rest_together() {
        let (millis, clock) = clock();
        let mut signals = Signals::new(10, clock);
        millis.store(1_500, Ordering::SeqCst);
        for route in 0..ROUTES_KEPT {
            let name = format!("GET /{route}");
            signals.done(Duration::from_millis(10), 200, true, Some(&name));
        }
        // Past them, two routes share an entry: the least of the two for both requests.
        signals.done(Duration::from_millis(20), 200, true, Some("GET /late"));
        signals.done(Duration::from_millis(60), 200, true, Some("GET /later"));
        let kept = ROUTES_KEPT as f64;
        let want = (kept * 10.0 + 2.0 * 20.0) / (kept + 2.0);
        let min_rt = value(&signals.sample(), "min_rt").expect("busy seconds");
        assert!((min_rt - want).abs() < 1e-9, "{min_rt} against {want}");
    }

    #[test]
    fn a_limits_refusal_and_the_limiters_own_answers_say_nothing_of_the_service() {
        assert!(!counts_for_service(429, false), "a 429, whoever made it");
        assert!(!counts_for_service(503, true), "the failure policy's 503");
        assert!(!counts_for_service(500, true));
        assert!(counts_for_service(503, false), "the service's own 503");
        assert!(counts_for_service(200, false));
        let (_, clock) = clock();
        let mut signals = Signals::new(10, clock);
        signals.started();
        signals.started();
        signals.left();
        signals.done(Duration::from_millis(5), 200, false, None);
        let sample = signals.sample();
        assert_eq!(value(&sample, "inflight"), Some(0.0));
        assert_eq!(value(&sample, "requests"), Some(1.0));
    }

    #[test]
    fn cpu_is_the_share_of_the_quota_and_memory_of_what_is_allowed() {
        let dir = std::env::temp_dir().join(format!("ratelimit-cgroup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        write("cpu.max", "200000 100000\n");
        write("cpu.stat", "usage_usec 5000000\nuser_usec 1\n");
        let (millis, clock) = clock();
        let mut meter = CpuMeter::new(dir.clone(), clock);
        assert_eq!(
            meter.read(),
            None,
            "the first reading has nothing to compare"
        );
        millis.store(2_000, Ordering::SeqCst);
        write("cpu.stat", "usage_usec 8000000\nuser_usec 1\n");
        assert_eq!(
            meter.read(),
            Some(0.75),
            "3 s of CPU in 2 s of a 2-core quota"
        );
        write("memory.current", "268435456\n");
        write("memory.max", "1073741824\n");
        assert_eq!(memory_share(&dir, Path::new("/nonexistent")), Some(0.25));
        write("memory.max", "max\n");
        write(
            "meminfo",
            "MemTotal:       1000 kB\nMemFree:  10 kB\nMemAvailable:    400 kB\n",
        );
        assert_eq!(memory_share(&dir, &dir.join("meminfo")), Some(0.6));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
