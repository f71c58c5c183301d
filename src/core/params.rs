//! Parameter validation shared by every limiter, and the one list of what a command answers
//! to parameters it refuses.

use std::ffi::CStr;

use super::time::{Micros, Unit};

/// Why a limiter's parameters are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamError {
    /// `max_burst` below zero.
    NegativeBurst,
    /// `count` zero or below.
    NonPositiveCount,
    /// `period` zero or below.
    NonPositivePeriod,
    /// More than 2^24 per nanosecond: the emission interval would be below one tick.
    RateTooHigh,
    /// `(max_burst + 1) * period / count` longer than 2^63 - 1 ns.
    BurstTooLong,
    /// `limit` zero or below.
    NonPositiveLimit,
    /// `window` zero or below.
    NonPositiveWindow,
    /// `window` longer than 2^63 - 1 ns.
    WindowTooLong,
    /// `window * n` microseconds beyond 2^63 - 1 (`BUCKETS n`).
    WindowTooLongForBuckets,
    /// `BUCKETS n` outside `1..=3600`.
    BucketsOutOfRange,
    /// Buckets shorter than a microsecond, the clock's resolution.
    BucketTooShort,
    /// An `RL.LOG` limit above 2^20.
    LimitTooHighForLog,
    /// An `RL.ACQUIRE` limit above 2^16.
    LimitTooHighForLeases,
    /// `lease` zero or below.
    NonPositiveLease,
    /// `lease` longer than 2^63 - 1 ns.
    LeaseTooLong,
    /// A `FORCE` quantity above [`MAX_DEBT_LIMITS`] times a limiter's limit.
    ForceTooLarge,
    /// `WARMUP` zero or below.
    NonPositiveWarmup,
    /// `WARMUP` longer than 2^63 - 1 ns.
    WarmupTooLong,
}

impl ParamError {
    /// The error reply.
    pub fn message(self) -> &'static CStr {
        match self {
            ParamError::NegativeBurst => c"ERR max_burst must not be negative",
            ParamError::NonPositiveCount => c"ERR count must be positive",
            ParamError::NonPositivePeriod => c"ERR period must be positive",
            ParamError::RateTooHigh => {
                c"ERR rate too high: count / period exceeds 2^24 per nanosecond"
            }
            ParamError::BurstTooLong => {
                c"ERR (max_burst + 1) * period / count is too long: the limit is 2^63 nanoseconds (292 years)"
            }
            ParamError::NonPositiveLimit => c"ERR limit must be positive",
            ParamError::NonPositiveWindow => c"ERR window must be positive",
            ParamError::WindowTooLong => {
                c"ERR window is too long: the limit is 2^63 nanoseconds (292 years)"
            }
            ParamError::WindowTooLongForBuckets => {
                c"ERR window is too long for BUCKETS: window * BUCKETS must stay below 2^63 microseconds"
            }
            ParamError::BucketsOutOfRange => BUCKETS_RANGE,
            ParamError::BucketTooShort => c"ERR window / BUCKETS must be at least 1 microsecond",
            ParamError::LimitTooHighForLog => {
                c"ERR limit is too high for RL.LOG: at most 1048576 (RL.WINDOW and CL.THROTTLE take any limit)"
            }
            ParamError::LimitTooHighForLeases => {
                c"ERR limit is too high for RL.ACQUIRE: at most 65536"
            }
            ParamError::NonPositiveLease => c"ERR lease must be positive",
            ParamError::LeaseTooLong => {
                c"ERR lease is too long: the limit is 2^63 nanoseconds (292 years)"
            }
            ParamError::ForceTooLarge => {
                c"ERR FORCE takes at most 16 times the limit at once"
            }
            ParamError::NonPositiveWarmup => c"ERR WARMUP must be positive",
            ParamError::WarmupTooLong => {
                c"ERR WARMUP is too long: the limit is 2^63 nanoseconds (292 years)"
            }
        }
    }
}

/// The reply to a `BUCKETS` count out of range.
pub const BUCKETS_RANGE: &CStr = c"ERR BUCKETS must be an integer from 1 to 3600";

/// The most buckets `BUCKETS n` accepts: an hour of one-second buckets.
pub const MAX_BUCKETS: i64 = 3_600;

/// The highest `limit` an `RL.LOG` takes: it bounds every call's work, since a request of
/// `quantity` takes up to `quantity / 1024` entries, and a log's memory (`limit` entries,
/// 8 MiB).
pub const MAX_LOG_LIMIT: u64 = 1 << 20;

/// The highest `limit` a lease set takes: it bounds the leases a key holds (each takes at
/// least one slot), and so its memory (1 MiB) and every call's work.
pub const MAX_LEASE_LIMIT: u64 = 1 << 16;

/// How many times its limit a `FORCE` may charge a limiter at once: it bounds the debt a
/// call runs up, and the work of placing it (a few steps per limit's worth).
pub const MAX_DEBT_LIMITS: u64 = 16;

/// Checks that a `FORCE` of `quantity` may be charged to a limiter of `limit`.
pub fn force_quantity(quantity: u64, limit: u64) -> Result<(), ParamError> {
    if quantity <= limit.saturating_mul(MAX_DEBT_LIMITS) {
        Ok(())
    } else {
        Err(ParamError::ForceTooLarge)
    }
}

/// A limit: at least 1.
pub fn limit(limit: i64) -> Result<u64, ParamError> {
    u64::try_from(limit)
        .ok()
        .filter(|&limit| limit > 0)
        .ok_or(ParamError::NonPositiveLimit)
}

/// A window of `amount` `unit`s: positive, and at most 2^63 - 1 ns.
pub fn window(amount: i64, unit: Unit) -> Result<Micros, ParamError> {
    duration(
        amount,
        unit,
        ParamError::NonPositiveWindow,
        ParamError::WindowTooLong,
    )
}

/// A lease of `amount` `unit`s: positive, and at most 2^63 - 1 ns.
pub fn lease(amount: i64, unit: Unit) -> Result<Micros, ParamError> {
    duration(
        amount,
        unit,
        ParamError::NonPositiveLease,
        ParamError::LeaseTooLong,
    )
}

/// A positive duration of `amount` `unit`s, at most 2^63 - 1 ns; `not_positive` or
/// `too_long` otherwise.
/// A warm-up of `amount` `unit`s: positive, and at most 2^63 - 1 ns.
pub fn warmup(amount: i64, unit: Unit) -> Result<Micros, ParamError> {
    duration(
        amount,
        unit,
        ParamError::NonPositiveWarmup,
        ParamError::WarmupTooLong,
    )
}

fn duration(
    amount: i64,
    unit: Unit,
    not_positive: ParamError,
    too_long: ParamError,
) -> Result<Micros, ParamError> {
    if amount <= 0 {
        return Err(not_positive);
    }
    unit.span(amount).ok_or(too_long)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_durations_are_checked_alike_everywhere() {
        assert_eq!(limit(1), Ok(1));
        assert_eq!(limit(0), Err(ParamError::NonPositiveLimit));
        assert_eq!(limit(-5), Err(ParamError::NonPositiveLimit));
        assert_eq!(
            window(60, Unit::Seconds),
            Ok(Micros::saturating(60_000_000))
        );
        assert_eq!(window(0, Unit::Seconds), Err(ParamError::NonPositiveWindow));
        assert_eq!(
            window(i64::MAX, Unit::Seconds),
            Err(ParamError::WindowTooLong)
        );
        assert_eq!(
            lease(-1, Unit::Milliseconds),
            Err(ParamError::NonPositiveLease)
        );
        assert_eq!(
            lease(i64::MAX, Unit::Microseconds),
            Err(ParamError::LeaseTooLong)
        );
        assert!(ParamError::BucketsOutOfRange
            .message()
            .to_str()
            .unwrap()
            .contains(&MAX_BUCKETS.to_string()));
        assert!(ParamError::LimitTooHighForLog
            .message()
            .to_str()
            .unwrap()
            .contains(&MAX_LOG_LIMIT.to_string()));
        assert!(ParamError::LimitTooHighForLeases
            .message()
            .to_str()
            .unwrap()
            .contains(&MAX_LEASE_LIMIT.to_string()));
    }
}
