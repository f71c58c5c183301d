//! What instances report (their factors, each report expiring on its own), how a factor's
//! value over the fleet is found, and the two factors derived from what was reported:
//! `bbr`, Sentinel's check past its trigger, and `admission`, envoy's success-rate
//! throttling.

use crate::core::time::Micros;

/// How a factor's value over the live reports is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregate {
    /// The largest value: the instance worst off (memory, queue of one shared broker).
    Max,
    /// The mean: the fleet's average (CPU, latency).
    Mean,
    /// The total: what the fleet holds together (in-flight requests, counts).
    Sum,
}

impl Aggregate {
    /// The keyword, as `FACTOR name MAX|MEAN|SUM` takes it.
    pub fn word(self) -> &'static str {
        match self {
            Aggregate::Max => "MAX",
            Aggregate::Mean => "MEAN",
            Aggregate::Sum => "SUM",
        }
    }

    /// The aggregate named `word` (case-insensitive).
    pub fn parse(word: &[u8]) -> Option<Aggregate> {
        [Aggregate::Max, Aggregate::Mean, Aggregate::Sum]
            .into_iter()
            .find(|aggregate| aggregate.word().as_bytes().eq_ignore_ascii_case(word))
    }

    /// Its code in the stored layout.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The aggregate stored as `code`.
    pub fn from_code(code: u8) -> Option<Aggregate> {
        [Aggregate::Max, Aggregate::Mean, Aggregate::Sum]
            .get(usize::from(code))
            .copied()
    }

    /// `values` aggregated; `None` for none.
    pub fn over(self, values: impl Iterator<Item = f64>) -> Option<f64> {
        let (mut count, mut sum, mut most) = (0u32, 0.0, f64::MIN);
        for value in values {
            count += 1;
            sum += value;
            most = most.max(value);
        }
        (count > 0).then(|| match self {
            Aggregate::Max => most,
            Aggregate::Mean => sum / f64::from(count),
            Aggregate::Sum => sum,
        })
    }
}

/// The factors every instance may report, and how each aggregates over the fleet.
pub const REPORTED: [(&str, Aggregate); 11] = [
    // The host's or the cgroup's CPU in use, 0 to 1.
    ("cpu", Aggregate::Mean),
    // Memory in use over what is allowed, 0 to 1: the instance nearest its limit.
    ("memory", Aggregate::Max),
    // Requests being served.
    ("inflight", Aggregate::Sum),
    // Work waiting: a queue's backlog.
    ("queue", Aggregate::Sum),
    // The latency of the interval, in milliseconds.
    ("latency", Aggregate::Mean),
    // The share of requests that failed (5xx) in the interval, 0 to 1.
    ("errors", Aggregate::Mean),
    // The run queue over the cores (load1 / cores).
    ("load", Aggregate::Mean),
    // The most requests completed in a second while busy, over the window (`bbr`).
    ("max_rps", Aggregate::Sum),
    // The least latency while busy, over the window, in milliseconds (`bbr`).
    ("min_rt", Aggregate::Mean),
    // The requests and the successes of the window (`admission`).
    ("requests", Aggregate::Sum),
    ("successes", Aggregate::Sum),
];

/// The factors the policy derives from what was reported.
pub const DERIVED: [&str; 2] = ["bbr", "admission"];

/// Whether `name` is a built-in factor, reported or derived.
pub fn built_in(name: &[u8]) -> bool {
    REPORTED.iter().any(|(known, _)| known.as_bytes() == name)
        || DERIVED.iter().any(|known| known.as_bytes() == name)
}

/// Whether `name` is a factor an instance may report under a policy declaring `custom`.
pub fn reportable(name: &[u8], custom: &[(Vec<u8>, Aggregate)]) -> bool {
    REPORTED.iter().any(|(known, _)| known.as_bytes() == name)
        || custom.iter().any(|(known, _)| known.as_slice() == name)
}

/// envoy's `admission_control` (the SRE book's client-side throttling), as the factor
/// `admission`: the share of requests to reject,
/// `((n - s / threshold) / (n + 1)) ^ (1 / aggression)`, at most `max_rejection`, 0 below
/// `min_requests` requests in the window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Admission {
    /// The success rate below which rejection starts (envoy's `sr_threshold`).
    pub threshold: f64,
    /// How fast rejection grows (envoy's `aggression`; 1 is linear).
    pub aggression: f64,
    /// The fewest requests in the window for any rejection (envoy's `rps_threshold`).
    pub min_requests: f64,
    /// The most it rejects (envoy's `max_rejection_probability`).
    pub max_rejection: f64,
}

impl Default for Admission {
    /// envoy's defaults: a 95% success rate, linear, from any number of requests, at most 80%.
    fn default() -> Admission {
        Admission {
            threshold: 0.95,
            aggression: 1.0,
            min_requests: 0.0,
            max_rejection: 0.8,
        }
    }
}

impl Admission {
    /// envoy's rejection probability for `requests` and `successes` in the window.
    pub fn rejection(&self, requests: f64, successes: f64) -> f64 {
        if requests <= 0.0 || requests < self.min_requests {
            return 0.0;
        }
        let excess = (requests - successes / self.threshold) / (requests + 1.0);
        if excess <= 0.0 {
            return 0.0;
        }
        excess.powf(1.0 / self.aggression).min(self.max_rejection)
    }
}

/// Sentinel's trigger for its BBR check: an instance's `bbr` counts only while that
/// instance's own report has `factor` at least `threshold`. Sentinel checks BBR only once
/// the system load passed its threshold: a pipe measured while demand, not capacity, set
/// the throughput reads any queue as an overload.
#[derive(Clone, Debug, PartialEq)]
pub struct BbrTrigger {
    /// The reported factor that triggers the check (`cpu` by default).
    pub factor: Vec<u8>,
    /// From which value of it (0.9 by default).
    pub threshold: f64,
}

impl Default for BbrTrigger {
    fn default() -> BbrTrigger {
        BbrTrigger {
            factor: b"cpu".to_vec(),
            threshold: 0.9,
        }
    }
}

/// One instance's report: its factors, until it expires.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The instance's name.
    pub instance: Vec<u8>,
    /// When the report stops counting.
    pub expires: Micros,
    /// What it reported.
    pub factors: Vec<(Vec<u8>, f64)>,
}

impl Report {
    /// What it reported of factor `name`.
    pub fn value(&self, name: &[u8]) -> Option<f64> {
        self.factors
            .iter()
            .find(|(factor, _)| factor.as_slice() == name)
            .map(|(_, value)| *value)
    }

    /// Sentinel's check for this instance, past `trigger`: the requests in flight over what
    /// the pipe holds (max throughput × min latency); `None` below the trigger or until
    /// all three are reported, 0 for an empty pipe.
    pub fn bbr(&self, trigger: &BbrTrigger) -> Option<f64> {
        if self.value(&trigger.factor)? < trigger.threshold {
            return None;
        }
        let inflight = self.value(b"inflight")?;
        let pipe = self.value(b"max_rps")? * self.value(b"min_rt")? / 1_000.0;
        Some(if pipe > 0.0 { inflight / pipe } else { 0.0 })
    }
}
