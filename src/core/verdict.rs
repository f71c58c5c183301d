//! The answer every limiter gives, and its five-integer reply.

use std::fmt;

use super::time::{Rounding, Ticks, Unit};

/// How long until a refused request would be admitted: a span, or none (the request was
/// admitted, or can never be).
///
/// A span with a sentinel rather than an `Option<Ticks>`, so that every byte of it is always
/// defined: an `Option`'s `None` leaves its 16-byte payload uninitialised, and the x86 code
/// for the maximum of two `i128` is a branch, which the compiler may take on that payload
/// before it rules the `None` out (the result is then thrown away). Nothing goes wrong, but
/// memcheck sees a jump on uninitialised memory and `make valgrind` could not tell it from a
/// real one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter(Ticks);

impl RetryAfter {
    /// Nothing to wait for.
    pub const NONE: RetryAfter = RetryAfter(Ticks::saturating(-1));

    /// A wait of `span` (a negative span is no wait at all).
    pub fn of(span: Ticks) -> RetryAfter {
        RetryAfter(span.max(Ticks::ZERO))
    }

    /// The wait, if there is one.
    pub fn get(self) -> Option<Ticks> {
        (self.0.get() >= 0).then_some(self.0)
    }

    /// The wait, or `otherwise` when there is none: arithmetic on it reads defined bytes.
    pub fn or(self, otherwise: Ticks) -> Ticks {
        if self.0.get() >= 0 {
            self.0
        } else {
            otherwise
        }
    }

    /// Whether there is a wait.
    pub fn is_some(self) -> bool {
        self.0.get() >= 0
    }

    /// Whether there is none.
    pub fn is_none(self) -> bool {
        !self.is_some()
    }
}

impl From<Option<Ticks>> for RetryAfter {
    fn from(wait: Option<Ticks>) -> RetryAfter {
        wait.map_or(RetryAfter::NONE, RetryAfter::of)
    }
}

impl PartialEq<Option<Ticks>> for RetryAfter {
    fn eq(&self, other: &Option<Ticks>) -> bool {
        self.get() == *other
    }
}

impl fmt::Debug for RetryAfter {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl Default for RetryAfter {
    fn default() -> RetryAfter {
        RetryAfter::NONE
    }
}

/// What a limiter decided for one request, before times are rounded into a reply unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The request was refused (and not counted).
    pub limited: bool,
    /// The most the limiter admits at once.
    pub limit: i64,
    /// How much more it would admit right now, after this request.
    pub remaining: i64,
    /// How long until this request would be admitted; `None` when it was admitted, or when
    /// it can never be (a quantity above the limit).
    pub retry_after: RetryAfter,
    /// How long until the limiter is back to full capacity.
    pub reset_after: Ticks,
}

impl Verdict {
    /// The reply shared by all commands:
    /// `[limited, limit, remaining, retry_after, reset_after]`, with `retry_after` -1 when
    /// there is nothing to wait for, and times as whole `unit`s.
    pub fn to_reply(self, unit: Unit, rounding: Rounding) -> [i64; 5] {
        [
            i64::from(self.limited),
            self.limit,
            self.remaining,
            if self.retry_after.is_some() {
                self.retry_after.or(Ticks::ZERO).in_units(unit, rounding)
            } else {
                -1
            },
            self.reset_after.in_units(unit, rounding),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::time::Micros;

    #[test]
    fn an_admitted_request_has_no_retry_time() {
        let verdict = Verdict {
            limited: false,
            limit: 16,
            remaining: 15,
            retry_after: RetryAfter::NONE,
            reset_after: Micros::saturating(2_000_000).ticks(),
        };
        assert_eq!(
            verdict.to_reply(Unit::Seconds, Rounding::RedisCell),
            [0, 16, 15, -1, 2]
        );
        assert_eq!(
            verdict.to_reply(Unit::Milliseconds, Rounding::Up),
            [0, 16, 15, -1, 2_000]
        );
    }

    #[test]
    fn a_limited_request_reports_times_in_the_requested_unit() {
        let verdict = Verdict {
            limited: true,
            limit: 5,
            remaining: 0,
            retry_after: RetryAfter::of(Micros::saturating(990_000).ticks()),
            reset_after: Micros::saturating(4_990_000).ticks(),
        };
        assert_eq!(
            verdict.to_reply(Unit::Seconds, Rounding::RedisCell),
            [1, 5, 0, 1, 5]
        );
        assert_eq!(
            verdict.to_reply(Unit::Milliseconds, Rounding::Up),
            [1, 5, 0, 990, 4_990]
        );
    }
}
