//! The answer every limiter gives, and its five-integer reply.

use super::time::{Rounding, Ticks, Unit};

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
    pub retry_after: Option<Ticks>,
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
            self.retry_after
                .map_or(-1, |span| span.in_units(unit, rounding)),
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
            retry_after: None,
            reset_after: Micros(2_000_000).ticks(),
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
            retry_after: Some(Micros(990_000).ticks()),
            reset_after: Micros(4_990_000).ticks(),
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
