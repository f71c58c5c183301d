//! A service's load state and how its level moves: entered at once when a threshold is
//! reached, left one level at a time, only once every factor of it is below its threshold
//! less the hysteresis and the level has held for `hold`, its shares easing into the lower
//! level's over that hold (level 0, which sheds nothing, at once); and the decision on a
//! request, drawn at random from its class's share.

use std::borrow::Cow;

use super::factors::Report;
use super::policy::{check_name, LoadError, Policy, MAX_INSTANCES, MAX_REPORT_FACTORS};
use super::priority::{admits, Priority};
use crate::core::time::Micros;

/// A service's load: the policy (its own, or the default), the level it is at, since when,
/// the shares it eases from, and the instances' reports.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadState {
    /// The policy set, or `None` for [`Policy::default`].
    pub policy: Option<Policy>,
    /// The level, 0 (none reached) upwards.
    pub level: u8,
    /// When the level was entered.
    pub since: Micros,
    /// The shares the level eases from, from `since` to `eased_until`.
    pub from: [u16; 4],
    /// When the easing ends (at or before `since`: none).
    pub eased_until: Micros,
    /// The reports, live or not.
    pub reports: Vec<Report>,
}

impl Default for LoadState {
    fn default() -> LoadState {
        LoadState {
            policy: None,
            level: 0,
            since: Micros::ZERO,
            from: Policy::default().shares_at(0),
            eased_until: Micros::ZERO,
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
    /// The level's own shares, per class, most important first, in parts of `WHOLE`.
    pub shares: [u16; 4],
    /// The shares it eases from: the level above's when this one (not level 0) was entered
    /// going down; the level's own otherwise.
    pub from: [u16; 4],
    /// When the easing ends: each share moves in a straight line from `from` at `since` to
    /// `shares` at `eased_until`.
    pub eased_until: Micros,
}

impl Standing {
    /// The share of class `class` (0 to 3) admitted at `now`, eased.
    pub fn share(&self, class: usize, now: Micros) -> u16 {
        let (from, to) = (self.from[class], self.shares[class]);
        if now >= self.eased_until {
            return to;
        }
        if now <= self.since {
            return from;
        }
        // Here since < now < eased_until: the span is positive.
        let span = i128::from((self.eased_until - self.since).get());
        let gone = i128::from((now - self.since).get());
        let eased = i128::from(from) + (i128::from(to) - i128::from(from)) * gone / span;
        eased as u16
    }

    /// Every class's share at `now`, eased.
    pub fn shares_at(&self, now: Micros) -> [u16; 4] {
        std::array::from_fn(|class| self.share(class, now))
    }
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
    pub fn policy(&self) -> Cow<'_, Policy> {
        match &self.policy {
            Some(policy) => Cow::Borrowed(policy),
            None => Cow::Owned(Policy::default()),
        }
    }

    /// The reports live at `now`.
    pub fn live(&self, now: Micros) -> impl Iterator<Item = &Report> {
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
                .filter_map(|report| report.bbr(&policy.bbr))
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
                reported.then(|| policy.admission.rejection(requests, successes))
            }
            _ => policy
                .aggregate_of(name)
                .over(self.live(now).filter_map(|report| report.value(name))),
        }
    }

    /// The standing at `now` from the live reports, given the level held since `since`:
    /// the highest level one of whose thresholds is reached, at once; else, once the
    /// current level has held for the policy's `hold`, one level down when no factor of
    /// the current level stays above its threshold less the hysteresis. A level entered
    /// going down eases its shares from the level left over the next `hold`; level 0 is
    /// entered at once.
    pub fn evaluate(&self, now: Micros) -> Standing {
        let policy = self.policy();
        let current = usize::from(self.level).min(policy.levels.len());
        let reached = |index: usize, scale: f64| {
            policy.levels[index]
                .thresholds
                .iter()
                .any(|(name, threshold)| {
                    self.factor(&policy, name, now)
                        .is_some_and(|value| value >= threshold * scale)
                })
        };
        let keep = 1.0 - f64::from(policy.hysteresis) / f64::from(super::priority::WHOLE);
        let entered = (0..policy.levels.len())
            .rev()
            .find(|&index| reached(index, 1.0))
            .map_or(0, |index| index + 1);
        let stays = current > 0 && reached(current - 1, keep);
        let shares = |level: usize| policy.shares_at(level);
        if entered > current {
            // Up at once, and without easing: an overload is met at the next report.
            return Standing {
                level: entered as u8,
                since: now,
                shares: shares(entered),
                from: shares(entered),
                eased_until: now,
            };
        }
        let held = now < self.hold_ends(&policy);
        if entered < current && !stays && !held {
            let level = current - 1;
            // Level 0 sheds nothing and is entered at once: what the level shed comes back
            // under each instance's own limit, which holds what its service can take, so a
            // load that has fallen is not refused for another hold after the overload.
            let (from, eased_until) = match level {
                0 => (shares(0), now),
                _ => (shares(current), now + policy.hold),
            };
            return Standing {
                level: level as u8,
                since: now,
                shares: shares(level),
                from,
                eased_until,
            };
        }
        Standing {
            level: current as u8,
            since: self.since,
            shares: shares(current),
            from: self.from,
            eased_until: self.eased_until,
        }
    }

    /// Decides a request of `priority` at `now` from this state (`draw`, a uniform random
    /// value, decides where the share is neither all nor nothing).
    pub fn decide(&self, priority: Priority, now: Micros, draw: u64) -> LoadDecision {
        let standing = self.evaluate(now);
        LoadDecision {
            level: standing.level,
            admitted: admits(standing.share(priority.index(), now), draw),
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
            if !super::factors::reportable(name, &policy.custom) {
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
            report
                .factors
                .retain(|(name, _)| super::factors::reportable(name, custom));
        }
        self.policy = policy;
        let policy = self.policy().into_owned();
        self.level = self.level.min(policy.levels.len() as u8);
        // What the level eased from belongs to the policy left: the new one's own shares.
        self.from = policy.shares_at(usize::from(self.level));
        self.eased_until = self.since;
        Ok(self.move_on(now))
    }

    /// Evaluates the standing at `now` and keeps it.
    fn move_on(&mut self, now: Micros) -> Standing {
        let standing = self.evaluate(now);
        self.level = standing.level;
        self.since = standing.since;
        self.from = standing.from;
        self.eased_until = standing.eased_until;
        standing
    }

    /// The first instant the level may step down: once it has held for the policy's `hold`,
    /// and never at the instant it was entered, whatever the hold (a standing evaluated
    /// twice at one instant is the same: a hold of 0 leaves a level a step an instant).
    fn hold_ends(&self, policy: &Policy) -> Micros {
        self.since + policy.hold.max(Micros::saturating(1))
    }

    /// Until when the stored standing stands without evaluating again: the first report to
    /// expire, or the end of the level's hold, whichever comes first (a later report writes
    /// the state again). An easing needs no evaluation: its shares follow from the stored
    /// standing at any time.
    pub fn valid_until(&self, now: Micros) -> Micros {
        let policy = self.policy();
        let first_expiry = self
            .live(now)
            .map(|report| report.expires)
            .min()
            .unwrap_or(now);
        let hold_end = self.hold_ends(&policy);
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
