//! Graded limiting by load: a service's health, reported by every instance, sets a level,
//! and each level admits a share of each priority class (seed 003's "分级限流", Sentinel's
//! system rules, Google's criticality classes).
//!
//! - **Signals.** Every instance reports its factors ([`Report`]: CPU, memory, in-flight
//!   requests, queue, latency, error ratio, load, and the counts the adaptive factors read),
//!   each report expiring on its own. A factor's value for the service is an aggregate over
//!   the live reports ([`Aggregate`]: max, mean or sum, per factor).
//! - **Adaptive factors**, derived from what was reported: `bbr`, Sentinel's check (the
//!   in-flight requests over what the pipe holds, max throughput × min latency), and
//!   `admission`, envoy's and the SRE book's success-rate throttling (the share to reject,
//!   from the requests and successes of the window).
//! - **Policy.** Levels, each entered when any of its factors reaches its threshold, and left
//!   only when every factor of it is below its threshold by the hysteresis, and not before
//!   the level has held for `hold`; each level admits a share of each priority class
//!   ([`Policy`]). Without a policy set, [`Policy::default`] applies.
//! - **Decision.** A request of a priority is admitted with the probability its level's share
//!   says ([`LoadState::decide`]): random, a share and not all or nothing, and the same for
//!   every instance and gateway, since the level lives in one key.
//!
//! The state is one string per service ([`LoadState::encode`]): a fixed header with the
//! level, since when, until when it holds without looking again, and the shares of that
//! level, so that a decision reads a few bytes; then the policy and the reports. Plain Rust,
//! no Redis types; the time and the random draw are passed in.

use super::time::Micros;

/// The tag of a load state: a byte UTF-8 text never holds, as the limiters' are.
pub const LOAD_TAG: u8 = 0xF7;
/// The layout's version, after the tag.
const VERSION: u8 = 1;

/// The priority classes, most important first (Google's criticality).
pub const PRIORITIES: [&str; 4] = ["critical_plus", "critical", "sheddable_plus", "sheddable"];
/// The most levels a policy has.
pub const MAX_LEVELS: usize = 8;
/// The most thresholds one level has.
pub const MAX_THRESHOLDS: usize = 8;
/// The most instances one service keeps reports of.
pub const MAX_INSTANCES: usize = 1_024;
/// The most factors one report holds.
pub const MAX_REPORT_FACTORS: usize = 16;
/// The most custom factors a policy declares.
pub const MAX_CUSTOM_FACTORS: usize = 16;
/// The longest instance or factor name, in bytes.
pub const MAX_NAME_LEN: usize = 64;
/// A share, in parts of 10,000: 10,000 admits everything.
pub const WHOLE: u16 = 10_000;

/// A priority class: 0 (`critical_plus`) to 3 (`sheddable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Priority(u8);

impl Priority {
    /// The class named `name` (case-insensitive) or numbered 0 to 3.
    pub fn parse(name: &[u8]) -> Option<Priority> {
        if let [digit @ b'0'..=b'3'] = name {
            return Some(Priority(digit - b'0'));
        }
        PRIORITIES
            .iter()
            .position(|class| class.as_bytes().eq_ignore_ascii_case(name))
            .map(|index| Priority(index as u8))
    }

    /// Its number, 0 (most important) to 3.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

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

    fn code(self) -> u8 {
        self as u8
    }

    fn from_code(code: u8) -> Option<Aggregate> {
        [Aggregate::Max, Aggregate::Mean, Aggregate::Sum]
            .get(usize::from(code))
            .copied()
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
    // The most requests completed in a second over the window (`bbr`).
    ("max_rps", Aggregate::Sum),
    // The least latency over the window, in milliseconds (`bbr`).
    ("min_rt", Aggregate::Mean),
    // The requests and the successes of the window (`admission`).
    ("requests", Aggregate::Sum),
    ("successes", Aggregate::Sum),
];

/// The factors the policy derives from what was reported.
pub const DERIVED: [&str; 2] = ["bbr", "admission"];

/// Whether `name` is a factor an instance may report under a policy declaring `custom`.
fn reportable(name: &[u8], custom: &[(Vec<u8>, Aggregate)]) -> bool {
    REPORTED.iter().any(|(known, _)| known.as_bytes() == name)
        || custom.iter().any(|(known, _)| known.as_slice() == name)
}

/// Why a report or a policy is refused; nothing is written then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// A factor the policy does not know (built in, or declared with `FACTOR`).
    UnknownFactor,
    /// A value that is not a finite number, or negative.
    BadValue,
    /// A share outside 0 to 1.
    BadShare,
    /// A level whose thresholds are below the level before it, for the same factor, or
    /// whose shares are above the level before it, for the same class.
    LevelOutOfOrder,
    /// A level whose shares rise from a more important class to a less important one.
    PriorityOutOfOrder,
    /// More levels, thresholds, reports, factors or bytes than the state holds.
    TooMany,
    /// A name that is empty or too long.
    BadName,
    /// `FACTOR` naming a built-in factor.
    BuiltInFactor,
    /// A duration or a parameter out of range.
    BadParameter,
}

impl LoadError {
    /// What the error reply says.
    pub fn message(self) -> &'static std::ffi::CStr {
        match self {
            LoadError::UnknownFactor => c"ERR unknown factor: report cpu, memory, inflight, queue, latency, errors, load, max_rps, min_rt, requests or successes, or declare it with FACTOR name MAX|MEAN|SUM in RL.LOAD.POLICY (bbr and admission are derived, not reported)",
            LoadError::BadValue => c"ERR a factor's value must be a finite number, not negative",
            LoadError::BadShare => c"ERR a share must be a number from 0 to 1",
            LoadError::LevelOutOfOrder => c"ERR levels out of order: a level's thresholds are at least the level's before it, and its shares at most those before it",
            LoadError::PriorityOutOfOrder => c"ERR shares out of order: a level admits a class at least as much as every less important one (critical_plus >= critical >= sheddable_plus >= sheddable)",
            LoadError::TooMany => c"ERR too many: at most 8 levels of 8 thresholds, 16 custom factors, 16 factors a report and 1024 instances a service",
            LoadError::BadName => c"ERR a name must have 1 to 64 bytes",
            LoadError::BuiltInFactor => c"ERR FACTOR declares a factor of the application's own, not a built-in one (cpu, memory, inflight, queue, latency, errors, load, max_rps, min_rt, requests, successes, bbr, admission): a threshold names those as they are",
            LoadError::BadParameter => c"ERR a parameter is out of range",
        }
    }
}

/// One level: entered when any threshold is reached; the share of each class it admits.
#[derive(Clone, Debug, PartialEq)]
pub struct Level {
    /// The factors and the values at which the level begins.
    pub thresholds: Vec<(Vec<u8>, f64)>,
    /// The share admitted per class, most important first, in parts of [`WHOLE`].
    pub shares: [u16; 4],
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

/// How a service's load sets its level, and what each level admits.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Level 1 upwards; level 0 (no level reached) admits everything.
    pub levels: Vec<Level>,
    /// How far below its threshold every factor of a level must fall for the level to be
    /// left, as a share of the threshold, in parts of [`WHOLE`].
    pub hysteresis: u16,
    /// How long a level holds at least, before a lower one may follow.
    pub hold: Micros,
    /// What a request shed by load is told to wait before it tries again.
    pub retry: Micros,
    /// The parameters of the factor `admission`.
    pub admission: Admission,
    /// Factors an application reports besides the built-in ones, with their aggregate.
    pub custom: Vec<(Vec<u8>, Aggregate)>,
}

impl Default for Policy {
    /// What applies until a policy is set: three levels on the host's health and the
    /// adaptive factors, each shedding the least important classes first.
    fn default() -> Policy {
        let level = |thresholds: &[(&str, f64)], shares: [u16; 4]| Level {
            thresholds: thresholds
                .iter()
                .map(|(name, value)| (name.as_bytes().to_vec(), *value))
                .collect(),
            shares,
        };
        Policy {
            levels: vec![
                level(
                    &[
                        ("cpu", 0.80),
                        ("memory", 0.85),
                        ("bbr", 1.0),
                        ("admission", 0.05),
                    ],
                    [WHOLE, WHOLE, WHOLE, 5_000],
                ),
                level(
                    &[
                        ("cpu", 0.90),
                        ("memory", 0.92),
                        ("bbr", 1.5),
                        ("admission", 0.2),
                    ],
                    [WHOLE, WHOLE, 5_000, 0],
                ),
                level(
                    &[
                        ("cpu", 0.95),
                        ("memory", 0.97),
                        ("bbr", 2.0),
                        ("admission", 0.5),
                    ],
                    [WHOLE, 5_000, 0, 0],
                ),
            ],
            hysteresis: 1_000,
            hold: Micros::saturating(2_000_000),
            retry: Micros::saturating(1_000_000),
            admission: Admission::default(),
            custom: Vec::new(),
        }
    }
}

impl Policy {
    /// The aggregate of factor `name`: a custom one's as declared, a built-in one's as
    /// [`REPORTED`] says.
    fn aggregate_of(&self, name: &[u8]) -> Aggregate {
        self.custom
            .iter()
            .find(|(custom, _)| custom.as_slice() == name)
            .map(|(_, aggregate)| *aggregate)
            .or_else(|| {
                REPORTED
                    .iter()
                    .find(|(known, _)| known.as_bytes() == name)
                    .map(|(_, aggregate)| *aggregate)
            })
            .unwrap_or(Aggregate::Max)
    }

    /// Checks the policy as a whole: every threshold names a known factor, levels in order,
    /// classes in order within each level, parameters in range.
    pub fn validate(&self) -> Result<(), LoadError> {
        if self.levels.is_empty() || self.levels.len() > MAX_LEVELS {
            return Err(LoadError::TooMany);
        }
        if self.custom.len() > MAX_CUSTOM_FACTORS {
            return Err(LoadError::TooMany);
        }
        for (name, _) in &self.custom {
            check_name(name)?;
            let built_in = REPORTED.iter().any(|(known, _)| known.as_bytes() == name)
                || DERIVED
                    .iter()
                    .any(|known| known.as_bytes() == name.as_slice());
            if built_in {
                return Err(LoadError::BuiltInFactor);
            }
        }
        let known = |name: &[u8]| {
            reportable(name, &self.custom) || DERIVED.iter().any(|d| d.as_bytes() == name)
        };
        if self.hysteresis > WHOLE
            || !(0.0..=1.0).contains(&self.admission.threshold)
            || self.admission.threshold == 0.0
            || !(self.admission.aggression.is_finite() && self.admission.aggression > 0.0)
            || !(self.admission.min_requests.is_finite() && self.admission.min_requests >= 0.0)
            || !(0.0..=1.0).contains(&self.admission.max_rejection)
            || self.hold < Micros::ZERO
            || self.retry < Micros::ZERO
        {
            return Err(LoadError::BadParameter);
        }
        let mut previous: Option<&Level> = None;
        for level in &self.levels {
            if level.thresholds.is_empty() || level.thresholds.len() > MAX_THRESHOLDS {
                return Err(LoadError::TooMany);
            }
            for (name, value) in &level.thresholds {
                if !known(name) {
                    return Err(LoadError::UnknownFactor);
                }
                if !(value.is_finite() && *value >= 0.0) {
                    return Err(LoadError::BadValue);
                }
            }
            if level.shares.iter().any(|&share| share > WHOLE) {
                return Err(LoadError::BadShare);
            }
            if level.shares.windows(2).any(|pair| pair[0] < pair[1]) {
                return Err(LoadError::PriorityOutOfOrder);
            }
            if let Some(before) = previous {
                let lower_threshold = level.thresholds.iter().any(|(name, value)| {
                    before
                        .thresholds
                        .iter()
                        .any(|(other, earlier)| other == name && value < earlier)
                });
                let higher_share = level
                    .shares
                    .iter()
                    .zip(before.shares)
                    .any(|(share, earlier)| *share > earlier);
                if lower_threshold || higher_share {
                    return Err(LoadError::LevelOutOfOrder);
                }
            }
            previous = Some(level);
        }
        Ok(())
    }
}

/// Parses a decimal number: an optional `-`, digits with an optional fraction, an optional
/// exponent (`1`, `0.25`, `.5`, `2e3`); nothing else (no spaces, no `inf`, no hex). `None`
/// for anything else, or a value beyond `f64`.
pub fn parse_number(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    let body = text.strip_prefix('-').unwrap_or(text);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    let exponent_ok = exponent.is_none_or(|exponent| {
        let digits_part = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
        !digits_part.is_empty() && digits(digits_part)
    });
    if (whole.is_empty() && fraction.is_empty())
        || !digits(whole)
        || !digits(fraction)
        || !exponent_ok
    {
        return None;
    }
    text.parse::<f64>().ok().filter(|value| value.is_finite())
}

/// A name of 1 to [`MAX_NAME_LEN`] bytes.
fn check_name(name: &[u8]) -> Result<(), LoadError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        Err(LoadError::BadName)
    } else {
        Ok(())
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
    fn value(&self, name: &[u8]) -> Option<f64> {
        self.factors
            .iter()
            .find(|(factor, _)| factor.as_slice() == name)
            .map(|(_, value)| *value)
    }

    /// Sentinel's check for this instance: the requests in flight over what the pipe holds
    /// (max throughput × min latency); 0 until both are known.
    fn bbr(&self) -> Option<f64> {
        let inflight = self.value(b"inflight")?;
        let pipe = self.value(b"max_rps")? * self.value(b"min_rt")? / 1_000.0;
        Some(if pipe > 0.0 { inflight / pipe } else { 0.0 })
    }
}

/// A service's load: the policy (its own, or the default), the level it is at and since
/// when, and the instances' reports.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadState {
    /// The policy set, or `None` for [`Policy::default`].
    pub policy: Option<Policy>,
    /// The level, 0 (none reached) upwards.
    pub level: u8,
    /// When the level was entered.
    pub since: Micros,
    /// The reports, live or not.
    pub reports: Vec<Report>,
}

impl Default for LoadState {
    fn default() -> LoadState {
        LoadState {
            policy: None,
            level: 0,
            since: Micros::ZERO,
            reports: Vec::new(),
        }
    }
}

/// A level, and the shares it admits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    /// The level, 0 for none.
    pub level: u8,
    /// When it was entered.
    pub since: Micros,
    /// The share admitted per class, most important first, in parts of [`WHOLE`].
    pub shares: [u16; 4],
}

/// What a decision on a request of one priority found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadDecision {
    /// The level the service is at.
    pub level: u8,
    /// Whether the request is admitted past the load gate.
    pub admitted: bool,
    /// What a shed request is told to wait.
    pub retry: Micros,
}

impl LoadState {
    /// The policy in force.
    pub fn policy(&self) -> std::borrow::Cow<'_, Policy> {
        match &self.policy {
            Some(policy) => std::borrow::Cow::Borrowed(policy),
            None => std::borrow::Cow::Owned(Policy::default()),
        }
    }

    /// The reports live at `now`.
    fn live(&self, now: Micros) -> impl Iterator<Item = &Report> {
        self.reports
            .iter()
            .filter(move |report| report.expires > now)
    }

    /// Factor `name`'s value over the reports live at `now`; `None` when no live report has
    /// it (then no threshold on it is reached).
    pub fn factor(&self, policy: &Policy, name: &[u8], now: Micros) -> Option<f64> {
        match name {
            b"bbr" => self
                .live(now)
                .filter_map(Report::bbr)
                .fold(None, |most: Option<f64>, value| {
                    Some(most.map_or(value, |m| m.max(value)))
                }),
            b"admission" => {
                let (requests, successes) = self.live(now).fold((0.0, 0.0), |(n, s), report| {
                    (
                        n + report.value(b"requests").unwrap_or(0.0),
                        s + report.value(b"successes").unwrap_or(0.0),
                    )
                });
                let reported = self
                    .live(now)
                    .any(|report| report.value(b"requests").is_some());
                reported.then(|| admission_rejection(&policy.admission, requests, successes))
            }
            _ => {
                let values = self.live(now).filter_map(|report| report.value(name));
                aggregate(policy.aggregate_of(name), values)
            }
        }
    }

    /// The level at `now` from the live reports, given the level held since `since`: the
    /// highest level one of whose thresholds is reached; or the current one (or one between)
    /// while any factor of it stays above its threshold less the hysteresis; and never lower
    /// before the current level has held for the policy's `hold`.
    pub fn evaluate(&self, now: Micros) -> Standing {
        let policy = self.policy();
        let current = usize::from(self.level).min(policy.levels.len());
        let values: Vec<Vec<Option<f64>>> = policy
            .levels
            .iter()
            .map(|level| {
                level
                    .thresholds
                    .iter()
                    .map(|(name, _)| self.factor(&policy, name, now))
                    .collect()
            })
            .collect();
        let reached = |index: usize, scale: f64| {
            policy.levels[index]
                .thresholds
                .iter()
                .zip(&values[index])
                .any(|((_, threshold), value)| value.is_some_and(|v| v >= threshold * scale))
        };
        let keep = 1.0 - f64::from(policy.hysteresis) / f64::from(WHOLE);
        let entered = (0..policy.levels.len())
            .rev()
            .find(|&index| reached(index, 1.0))
            .map_or(0, |index| index + 1);
        let kept = (0..current)
            .rev()
            .find(|&index| reached(index, keep))
            .map_or(0, |index| index + 1);
        let target = entered.max(kept);
        let held = target < current && now < self.since + policy.hold;
        let (level, since) = if held || target == current {
            (current, self.since)
        } else {
            (target, now)
        };
        Standing {
            level: level as u8,
            since,
            shares: shares_at(&policy, level),
        }
    }

    /// Decides a request of `priority` at `now` from this state (`draw`, a uniform random
    /// value, decides where the share is neither all nor nothing).
    pub fn decide(&self, priority: Priority, now: Micros, draw: u64) -> LoadDecision {
        let standing = self.evaluate(now);
        LoadDecision {
            level: standing.level,
            admitted: admits(standing.shares[priority.index()], draw),
            retry: self.policy().retry,
        }
    }

    /// Records `report` at `now` (replacing the instance's last one, dropping reports that
    /// expired), and moves the level on. `TooMany` when the service has as many live
    /// instances as it keeps.
    pub fn report(&mut self, report: Report, now: Micros) -> Result<Standing, LoadError> {
        check_name(&report.instance)?;
        if report.factors.len() > MAX_REPORT_FACTORS {
            return Err(LoadError::TooMany);
        }
        let policy = self.policy().into_owned();
        for (name, value) in &report.factors {
            check_name(name)?;
            if !reportable(name, &policy.custom) {
                return Err(LoadError::UnknownFactor);
            }
            if !(value.is_finite() && *value >= 0.0) {
                return Err(LoadError::BadValue);
            }
        }
        let repeated = report.factors.iter().enumerate().any(|(at, (name, _))| {
            report.factors[..at]
                .iter()
                .any(|(earlier, _)| earlier == name)
        });
        if repeated {
            return Err(LoadError::BadParameter);
        }
        self.reports
            .retain(|kept| kept.expires > now && kept.instance != report.instance);
        if self.reports.len() >= MAX_INSTANCES {
            return Err(LoadError::TooMany);
        }
        self.reports.push(report);
        Ok(self.move_on(now))
    }

    /// Sets `policy` (or the default, `None`), checked, and moves the level on at once.
    pub fn set_policy(
        &mut self,
        policy: Option<Policy>,
        now: Micros,
    ) -> Result<Standing, LoadError> {
        if let Some(policy) = &policy {
            policy.validate()?;
        }
        let custom = policy.as_ref().map_or(&[][..], |p| &p.custom[..]);
        // Reports of factors the new policy no longer knows stop counting them.
        for report in &mut self.reports {
            report.factors.retain(|(name, _)| reportable(name, custom));
        }
        self.policy = policy;
        self.level = self.level.min(self.policy().levels.len() as u8);
        Ok(self.move_on(now))
    }

    /// Evaluates the level at `now` and keeps it.
    fn move_on(&mut self, now: Micros) -> Standing {
        let standing = self.evaluate(now);
        self.level = standing.level;
        self.since = standing.since;
        standing
    }

    /// Until when the stored level stands without evaluating again: the first report to
    /// expire, or the end of the level's hold, whichever comes first (a later report writes
    /// the state again).
    pub fn valid_until(&self, now: Micros) -> Micros {
        let policy = self.policy();
        let first_expiry = self
            .live(now)
            .map(|report| report.expires)
            .min()
            .unwrap_or(now);
        let hold_end = self.since + policy.hold;
        if hold_end > now {
            first_expiry.min(hold_end)
        } else {
            first_expiry
        }
    }

    /// When the key may go: when the last report expires, unless a policy is set, which is
    /// kept as configuration is (`None`: no expiry).
    pub fn expires(&self, now: Micros) -> Option<Micros> {
        if self.policy.is_some() {
            return None;
        }
        Some(
            self.live(now)
                .map(|report| report.expires)
                .max()
                .unwrap_or(now),
        )
    }
}

/// The shares level `level` of `policy` admits (level 0: everything).
fn shares_at(policy: &Policy, level: usize) -> [u16; 4] {
    match level
        .checked_sub(1)
        .and_then(|index| policy.levels.get(index))
    {
        Some(level) => level.shares,
        None => [WHOLE; 4],
    }
}

/// Whether a share of `share` parts of [`WHOLE`] admits the request that drew `draw`.
pub fn admits(share: u16, draw: u64) -> bool {
    (draw % u64::from(WHOLE)) < u64::from(share)
}

/// `values` aggregated; `None` for none.
fn aggregate(aggregate: Aggregate, values: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut count, mut sum, mut most) = (0u32, 0.0, f64::MIN);
    for value in values {
        count += 1;
        sum += value;
        most = most.max(value);
    }
    (count > 0).then(|| match aggregate {
        Aggregate::Max => most,
        Aggregate::Mean => sum / f64::from(count),
        Aggregate::Sum => sum,
    })
}

/// envoy's rejection probability for `requests` and `successes` in the window.
pub fn admission_rejection(admission: &Admission, requests: f64, successes: f64) -> f64 {
    if requests <= 0.0 || requests < admission.min_requests {
        return 0.0;
    }
    let excess = (requests - successes / admission.threshold) / (requests + 1.0);
    if excess <= 0.0 {
        return 0.0;
    }
    excess
        .powf(1.0 / admission.aggression)
        .min(admission.max_rejection)
}

/// The load gate of a call (`LOAD priority` in `RL.ALL`): the service's level decides, for
/// a request of this priority, whether it goes on to the other limiters; it writes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadGate {
    /// The request's class.
    pub priority: Priority,
}

/// The longest load state a key may hold: 1,024 reports of 16 factors, and the policy.
pub const MAX_STATE_LEN: usize = 1 << 22;

impl LoadGate {
    /// Decides the gate for a request at `now` from the key's stored bytes (`None`: no key,
    /// level 0, everything admitted); `draw` is a uniform random value. `None` for bytes
    /// that are not a load state.
    pub fn decide(&self, stored: Option<&[u8]>, now: Micros, draw: u64) -> Option<LoadDecision> {
        let Some(bytes) = stored else {
            return Some(LoadDecision {
                level: 0,
                admitted: true,
                retry: Micros::ZERO,
            });
        };
        // While the stored level stands, its header says all a decision needs.
        if let Some((standing, retry)) = LoadState::standing_in_header(bytes, now) {
            return Some(LoadDecision {
                level: standing.level,
                admitted: admits(standing.shares[self.priority.index()], draw),
                retry,
            });
        }
        Some(LoadState::decode(bytes)?.decide(self.priority, now, draw))
    }
}

/// Whether a string of `len` bytes may hold a load state.
pub fn is_load_length(len: usize) -> bool {
    (HEADER_LEN + 2..=MAX_STATE_LEN).contains(&len)
}

// The stored layout, little-endian:
//
// ```text
// 0      tag (0xF7), version (1), level, flags (bit 0: a policy is set)
// 4      since (µs, 8 bytes)      when the level was entered
// 12     valid until (µs, 8)      until when `level` and `shares` stand without evaluating
// 20     shares (4 × 2 bytes)     of `level`, most important class first
// 28     retry (µs, 8)            what a shed request is told to wait
// 36     the policy (when set): hysteresis (2), hold (µs, 8), admission (4 × f64),
//        custom factors (count, then name and aggregate each), levels (count, then per
//        level: shares (4 × 2), thresholds (count, then name and f64 each))
// then   the reports: count (2), then per report: instance name, expires (µs, 8), factors
//        (count, then name and f64 each)
// ```
//
// A name is its length (1 byte) and its bytes.

/// The fixed header's length: what a decision reads.
pub const HEADER_LEN: usize = 36;

impl LoadState {
    /// The state as stored at `now` (the header's standing evaluated then).
    pub fn encode(&self, now: Micros, out: &mut Vec<u8>) {
        let standing = self.evaluate(now);
        out.clear();
        out.extend_from_slice(&[
            LOAD_TAG,
            VERSION,
            standing.level,
            u8::from(self.policy.is_some()),
        ]);
        out.extend_from_slice(&standing.since.get().to_le_bytes());
        out.extend_from_slice(&self.valid_until(now).get().to_le_bytes());
        for share in standing.shares {
            out.extend_from_slice(&share.to_le_bytes());
        }
        out.extend_from_slice(&self.policy().retry.get().to_le_bytes());
        if let Some(policy) = &self.policy {
            out.extend_from_slice(&policy.hysteresis.to_le_bytes());
            out.extend_from_slice(&policy.hold.get().to_le_bytes());
            let admission = &policy.admission;
            for value in [
                admission.threshold,
                admission.aggression,
                admission.min_requests,
                admission.max_rejection,
            ] {
                out.extend_from_slice(&value.to_le_bytes());
            }
            out.push(policy.custom.len() as u8);
            for (name, aggregate) in &policy.custom {
                push_name(name, out);
                out.push(aggregate.code());
            }
            out.push(policy.levels.len() as u8);
            for level in &policy.levels {
                for share in level.shares {
                    out.extend_from_slice(&share.to_le_bytes());
                }
                push_factors(&level.thresholds, out);
            }
        }
        out.extend_from_slice(&(self.reports.len() as u16).to_le_bytes());
        for report in &self.reports {
            push_name(&report.instance, out);
            out.extend_from_slice(&report.expires.get().to_le_bytes());
            push_factors(&report.factors, out);
        }
    }

    /// The state stored in `bytes`; `None` for bytes that are not a load state, or one
    /// that does not check (so that bytes no module wrote are refused, never trusted).
    pub fn decode(bytes: &[u8]) -> Option<LoadState> {
        let mut reader = Reader(bytes);
        let [tag, version, level, flags] = reader.array::<4>()?;
        if tag != LOAD_TAG || version != VERSION || flags > 1 {
            return None;
        }
        let since = Micros::instant(reader.i64()?)?;
        reader.i64()?; // Valid until: derived again when written.
        reader.array::<8>()?; // The shares: derived again.
        let retry = Micros::instant(reader.i64()?)?;
        let policy = if flags == 1 {
            let hysteresis = reader.u16()?;
            let hold = Micros::instant(reader.i64()?)?;
            let admission = Admission {
                threshold: reader.f64()?,
                aggression: reader.f64()?,
                min_requests: reader.f64()?,
                max_rejection: reader.f64()?,
            };
            let mut custom = Vec::new();
            for _ in 0..reader.u8()? {
                let name = reader.name()?;
                custom.push((name, Aggregate::from_code(reader.u8()?)?));
            }
            let mut levels = Vec::new();
            for _ in 0..reader.u8()? {
                let mut shares = [0; 4];
                for share in &mut shares {
                    *share = reader.u16()?;
                }
                levels.push(Level {
                    shares,
                    thresholds: reader.factors()?,
                });
            }
            let policy = Policy {
                levels,
                hysteresis,
                hold,
                retry,
                admission,
                custom,
            };
            policy.validate().ok()?;
            Some(policy)
        } else {
            None
        };
        let mut reports = Vec::new();
        for _ in 0..reader.u16()? {
            let instance = reader.name()?;
            let expires = Micros::instant(reader.i64()?)?;
            let factors = reader.factors()?;
            if factors.len() > MAX_REPORT_FACTORS {
                return None;
            }
            reports.push(Report {
                instance,
                expires,
                factors,
            });
        }
        if !reader.0.is_empty() || reports.len() > MAX_INSTANCES {
            return None;
        }
        let state = LoadState {
            policy,
            level,
            since,
            reports,
        };
        (usize::from(level) <= state.policy().levels.len()).then_some(state)
    }

    /// The standing a decision at `now` reads from a stored state's header alone, while it
    /// stands (before its "valid until"); `None` after, or for bytes that are not a load
    /// state: then the whole state is decoded and evaluated.
    pub fn standing_in_header(bytes: &[u8], now: Micros) -> Option<(Standing, Micros)> {
        let header = bytes.get(..HEADER_LEN)?;
        if header[0] != LOAD_TAG || header[1] != VERSION {
            return None;
        }
        let word = |at: usize| i64::from_le_bytes(header[at..at + 8].try_into().expect("8"));
        let valid_until = Micros::instant(word(12))?;
        if now >= valid_until {
            return None;
        }
        let mut shares = [0; 4];
        for (index, share) in shares.iter_mut().enumerate() {
            let at = 20 + 2 * index;
            *share = u16::from_le_bytes([header[at], header[at + 1]]).min(WHOLE);
        }
        let standing = Standing {
            level: header[2],
            since: Micros::instant(word(4))?,
            shares,
        };
        Some((standing, Micros::instant(word(28))?))
    }
}

fn push_name(name: &[u8], out: &mut Vec<u8>) {
    out.push(name.len() as u8);
    out.extend_from_slice(name);
}

fn push_factors(factors: &[(Vec<u8>, f64)], out: &mut Vec<u8>) {
    out.push(factors.len() as u8);
    for (name, value) in factors {
        push_name(name, out);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// Reads a stored state, every read checked.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.array()?))
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.array()?))
    }

    fn f64(&mut self) -> Option<f64> {
        Some(f64::from_le_bytes(self.array()?)).filter(|value| value.is_finite())
    }

    fn name(&mut self) -> Option<Vec<u8>> {
        let len = usize::from(self.u8()?);
        if len == 0 || len > MAX_NAME_LEN || self.0.len() < len {
            return None;
        }
        let (name, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(name.to_vec())
    }

    fn factors(&mut self) -> Option<Vec<(Vec<u8>, f64)>> {
        let count = self.u8()?;
        let mut factors = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let name = self.name()?;
            factors.push((name, self.f64()?));
        }
        Some(factors)
    }
}

#[cfg(test)]
mod tests;
