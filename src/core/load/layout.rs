//! A service's load state as stored: one string per service, with a fixed header that says
//! the level, since when, until when it stands without evaluating again, and the shares it
//! admits and eases from, so that a decision reads a few bytes; then the policy and the
//! reports. States of layout 1 (written before the levels eased) still load.
//!
//! ```text
//! 0      tag (0xF7), version (2), level, flags (bit 0: a policy is set)
//! 4      since (µs, 8 bytes)      when the level was entered
//! 12     valid until (µs, 8)      until when the header stands without evaluating
//! 20     shares (4 × 2 bytes)     of `level`, most important class first
//! 28     retry (µs, 8)            what a shed request is told to wait
//! 36     from (4 × 2)             the shares the level eases from, since `since`
//! 44     eased until (µs, 8)      when the easing ends
//! 52     the policy (when set): hysteresis (2), hold (µs, 8), admission (4 × f64), the
//!        BBR trigger (name, f64), custom factors (count, then name and aggregate each),
//!        levels (count, then per level: shares (4 × 2), thresholds (count, then name and
//!        f64 each))
//! then   the reports: count (2), then per report: instance name, expires (µs, 8), factors
//!        (count, then name and f64 each)
//! ```
//!
//! A name is its length (1 byte) and its bytes, little-endian throughout. Layout 1 is the
//! same without the bytes from 36 to 52 and without the BBR trigger (the default applies).

use super::factors::{Admission, Aggregate, BbrTrigger, Report};
use super::levels::{LoadState, Standing};
use super::policy::{Level, Policy, MAX_INSTANCES, MAX_NAME_LEN, MAX_REPORT_FACTORS};
use super::priority::WHOLE;
use crate::core::time::Micros;

pub use crate::core::codec::LOAD_TAG;
/// The layout written.
pub const VERSION: u8 = 2;
/// The layout written before the levels eased, still read.
const VERSION_1: u8 = 1;

/// The fixed header's length: what a decision reads.
pub const HEADER_LEN: usize = 52;
/// Layout 1's header.
const HEADER_1_LEN: usize = 36;

/// The longest load state a key may hold: 1,024 reports of 16 factors, and the policy.
pub const MAX_STATE_LEN: usize = 1 << 22;

/// Whether a string of `len` bytes may hold a load state (of either layout).
pub fn is_load_length(len: usize) -> bool {
    (HEADER_1_LEN + 2..=MAX_STATE_LEN).contains(&len)
}

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
        push_shares(&standing.shares, out);
        out.extend_from_slice(&self.policy().retry.get().to_le_bytes());
        push_shares(&standing.from, out);
        out.extend_from_slice(&standing.eased_until.get().to_le_bytes());
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
            push_name(&policy.bbr.factor, out);
            out.extend_from_slice(&policy.bbr.threshold.to_le_bytes());
            out.push(policy.custom.len() as u8);
            for (name, aggregate) in &policy.custom {
                push_name(name, out);
                out.push(aggregate.code());
            }
            out.push(policy.levels.len() as u8);
            for level in &policy.levels {
                push_shares(&level.shares, out);
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

    /// The state stored in `bytes` (either layout); `None` for bytes that are not a load
    /// state, or one that does not check (so that bytes no module wrote are refused, never
    /// trusted).
    pub fn decode(bytes: &[u8]) -> Option<LoadState> {
        let mut reader = Reader(bytes);
        let [tag, version, level, flags] = reader.array::<4>()?;
        if tag != LOAD_TAG || !(version == VERSION || version == VERSION_1) || flags > 1 {
            return None;
        }
        let since = Micros::instant(reader.i64()?)?;
        reader.i64()?; // Valid until: derived again when written.
        let shares = reader.shares()?;
        let retry = Micros::instant(reader.i64()?)?;
        let (from, eased_until) = if version == VERSION {
            (reader.shares()?, Micros::instant(reader.i64()?)?)
        } else {
            (shares, since)
        };
        let policy = if flags == 1 {
            let hysteresis = reader.u16()?;
            let hold = Micros::instant(reader.i64()?)?;
            let admission = Admission {
                threshold: reader.f64()?,
                aggression: reader.f64()?,
                min_requests: reader.f64()?,
                max_rejection: reader.f64()?,
            };
            let bbr = if version == VERSION {
                BbrTrigger {
                    factor: reader.name()?,
                    threshold: reader.f64()?,
                }
            } else {
                BbrTrigger::default()
            };
            let mut custom = Vec::new();
            for _ in 0..reader.u8()? {
                let name = reader.name()?;
                custom.push((name, Aggregate::from_code(reader.u8()?)?));
            }
            let mut levels = Vec::new();
            for _ in 0..reader.u8()? {
                let shares = reader.shares()?;
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
                bbr,
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
            from,
            eased_until,
            reports,
        };
        (usize::from(level) <= state.policy().levels.len()).then_some(state)
    }
}

/// A stored state's bytes, read no further than its header.
pub struct LoadStateBytes<'a>(pub &'a [u8]);

impl LoadStateBytes<'_> {
    /// The standing a decision at `now` reads from the header alone, while it stands (before
    /// its "valid until"), and the retry; `None` after, or for bytes that are not a load
    /// state: then the whole state is decoded and evaluated.
    pub fn standing(&self, now: Micros) -> Option<(Standing, Micros)> {
        let bytes = self.0;
        let version = *bytes.get(1)?;
        let len = match version {
            VERSION => HEADER_LEN,
            VERSION_1 => HEADER_1_LEN,
            _ => return None,
        };
        let header = bytes.get(..len)?;
        if header[0] != LOAD_TAG {
            return None;
        }
        let word = |at: usize| {
            let mut eight = [0; 8];
            eight.copy_from_slice(&header[at..at + 8]);
            i64::from_le_bytes(eight)
        };
        let shares_from = |at: usize| -> [u16; 4] {
            std::array::from_fn(|index| {
                let at = at + 2 * index;
                u16::from_le_bytes([header[at], header[at + 1]]).min(WHOLE)
            })
        };
        let valid_until = Micros::instant(word(12))?;
        if now >= valid_until {
            return None;
        }
        let since = Micros::instant(word(4))?;
        let shares = shares_from(20);
        let (from, eased_until) = if version == VERSION {
            (shares_from(36), Micros::instant(word(44))?)
        } else {
            (shares, since)
        };
        let standing = Standing {
            level: header[2],
            since,
            shares,
            from,
            eased_until,
        };
        Some((standing, Micros::instant(word(28))?))
    }
}

fn push_name(name: &[u8], out: &mut Vec<u8>) {
    out.push(name.len() as u8);
    out.extend_from_slice(name);
}

fn push_shares(shares: &[u16; 4], out: &mut Vec<u8>) {
    for share in shares {
        out.extend_from_slice(&share.to_le_bytes());
    }
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

    /// Four shares, each at most [`WHOLE`].
    fn shares(&mut self) -> Option<[u16; 4]> {
        let mut shares = [0; 4];
        for share in &mut shares {
            *share = self.u16()?;
            if *share > WHOLE {
                return None;
            }
        }
        Some(shares)
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
