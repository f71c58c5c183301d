//! A service's policy: its levels (each entered when any of its thresholds is reached, and
//! admitting a share of each priority class), how a level is left (hysteresis, hold), the
//! adaptive factors' parameters, and the factors the application declares. Without a policy
//! set, [`Policy::default`] applies.

use super::factors::{built_in, reportable, Admission, Aggregate, BbrTrigger, REPORTED};
use super::priority::WHOLE;
use crate::core::time::Micros;

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
    /// `BBR` naming a factor no instance reports (a derived one, or one not declared).
    BadTrigger,
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
            LoadError::BadTrigger => c"ERR BBR takes a factor the instances report (cpu, load, or one declared with FACTOR) and the value from which their bbr counts",
            LoadError::BadParameter => c"ERR a parameter is out of range",
        }
    }
}

/// A name of 1 to [`MAX_NAME_LEN`] bytes.
pub fn check_name(name: &[u8]) -> Result<(), LoadError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        Err(LoadError::BadName)
    } else {
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

/// One level: entered when any threshold is reached; the share of each class it admits.
#[derive(Clone, Debug, PartialEq)]
pub struct Level {
    /// The factors and the values at which the level begins.
    pub thresholds: Vec<(Vec<u8>, f64)>,
    /// The share admitted per class, most important first, in parts of [`WHOLE`].
    pub shares: [u16; 4],
}

/// How a service's load sets its level, and what each level admits.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Level 1 upwards; level 0 (no level reached) admits everything.
    pub levels: Vec<Level>,
    /// How far below its threshold every factor of a level must fall for the level to be
    /// left, as a share of the threshold, in parts of [`WHOLE`].
    pub hysteresis: u16,
    /// How long a level holds at least, before the one below may follow; a level left
    /// eases its shares into the lower one's over the same time.
    pub hold: Micros,
    /// What a request shed by load is told to wait before it tries again.
    pub retry: Micros,
    /// The parameters of the factor `admission`.
    pub admission: Admission,
    /// From when an instance's `bbr` counts.
    pub bbr: BbrTrigger,
    /// Factors an application reports besides the built-in ones, with their aggregate.
    pub custom: Vec<(Vec<u8>, Aggregate)>,
}

impl Default for Policy {
    /// What applies until a policy is set: three levels on what an instance's own limit on
    /// requests in flight cannot see or mend (memory running out, requests failing, a queue
    /// far past what the instance's pipe holds while its CPU is spent), each shedding the
    /// least important classes first. The CPU alone sets no level: a service that sheds by
    /// itself runs its CPU full whatever the overload, so a level on it would cut what the
    /// service can still serve (Sentinel steers by its BBR check past the CPU, not by it).
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
                    &[("memory", 0.90), ("bbr", 4.0), ("admission", 0.05)],
                    [WHOLE, WHOLE, WHOLE, 5_000],
                ),
                level(
                    &[("memory", 0.95), ("bbr", 8.0), ("admission", 0.2)],
                    [WHOLE, WHOLE, 5_000, 0],
                ),
                level(
                    &[("memory", 0.98), ("bbr", 16.0), ("admission", 0.5)],
                    [WHOLE, 5_000, 0, 0],
                ),
            ],
            hysteresis: 1_000,
            hold: Micros::saturating(1_000_000),
            retry: Micros::saturating(1_000_000),
            admission: Admission::default(),
            bbr: BbrTrigger::default(),
            custom: Vec::new(),
        }
    }
}

impl Policy {
    /// The aggregate of factor `name`: a custom one's as declared, a built-in one's as
    /// [`REPORTED`] says.
    pub fn aggregate_of(&self, name: &[u8]) -> Aggregate {
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

    /// The shares level `level` admits (level 0: everything).
    pub fn shares_at(&self, level: usize) -> [u16; 4] {
        match level
            .checked_sub(1)
            .and_then(|index| self.levels.get(index))
        {
            Some(level) => level.shares,
            None => [WHOLE; 4],
        }
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
            if built_in(name) {
                return Err(LoadError::BuiltInFactor);
            }
        }
        let trigger_ok = reportable(&self.bbr.factor, &self.custom)
            && self.bbr.threshold.is_finite()
            && self.bbr.threshold >= 0.0;
        if !trigger_ok {
            return Err(LoadError::BadTrigger);
        }
        let known = |name: &[u8]| reportable(name, &self.custom) || built_in(name);
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
