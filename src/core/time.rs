//! Time as the cores see it: instants (since the Unix epoch) and spans, both counted in
//! ticks of 2^-24 nanoseconds.
//!
//! The server clock only has microsecond precision, but rates are `count / period`, and an
//! emission interval such as 1 s / 3 or 1 s / 3,000,000 is not a whole number of
//! nanoseconds. Counting in sub-nanosecond ticks keeps such intervals exact to within
//! 2^-24 ns, so the long-run rate matches the configured one even above a billion per second.

/// An instant since the Unix epoch, or a span of time, in ticks of 2^-24 ns.
pub type Ticks = i128;

/// Ticks in one nanosecond.
pub const TICKS_PER_NANOSECOND: Ticks = 1 << 24;
/// Ticks in one microsecond.
pub const TICKS_PER_MICROSECOND: Ticks = 1_000 * TICKS_PER_NANOSECOND;
/// Ticks in one millisecond.
pub const TICKS_PER_MILLISECOND: Ticks = 1_000 * TICKS_PER_MICROSECOND;
/// Ticks in one second.
pub const TICKS_PER_SECOND: Ticks = 1_000 * TICKS_PER_MILLISECOND;

/// The longest span a limiter may cover: 2^63 - 1 ns, about 292 years.
///
/// Bounding spans keeps every stored instant below [`MAX_INSTANT`] (the clock is centuries
/// away from it) and every time in a reply within an `i64`, whatever the unit.
pub const MAX_SPAN: Ticks = i64::MAX as Ticks * TICKS_PER_NANOSECOND;

/// The latest instant a value may hold: 2^88 - 1 ticks, in the year 2554.
pub const MAX_INSTANT: Ticks = (1 << 88) - 1;

/// Converts a clock reading in microseconds since the epoch to ticks.
pub const fn from_micros(micros: i64) -> Ticks {
    micros as Ticks * TICKS_PER_MICROSECOND
}

/// The first whole millisecond at or after `instant`: where a key's expiry goes so that it
/// never disappears before the state it holds stops mattering.
pub fn ceil_millis(instant: Ticks) -> i64 {
    // Every instant from 0 to MAX_INSTANT has its whole nanoseconds below 2^64: the
    // division is then by a constant, in 64 bits (a multiplication), where i128 would call
    // a division routine.
    if (0..=MAX_INSTANT).contains(&instant) {
        let (nanos, fraction) = split_nanos(instant);
        let millis = nanos / 1_000_000 + u64::from(nanos % 1_000_000 != 0 || fraction != 0);
        return millis as i64; // At most 2^64 / 10^6.
    }
    let millis = instant.div_euclid(TICKS_PER_MILLISECOND)
        + Ticks::from(instant.rem_euclid(TICKS_PER_MILLISECOND) != 0);
    i64::try_from(millis).expect("instants are bounded by MAX_INSTANT")
}

/// The whole nanoseconds of `ticks` (from 0 to 2^88 - 1) and the ticks left over.
fn split_nanos(ticks: Ticks) -> (u64, u64) {
    debug_assert!((0..1 << 88).contains(&ticks));
    (
        (ticks >> 24) as u64,
        ticks as u64 & (TICKS_PER_NANOSECOND as u64 - 1),
    )
}

/// The unit of periods and windows in a command's arguments, and of times in its reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unit {
    /// Seconds, the default (and redis-cell's only unit).
    #[default]
    Seconds,
    /// Milliseconds (`MS`).
    Milliseconds,
    /// Microseconds (`US`).
    Microseconds,
}

impl Unit {
    /// Ticks in one of this unit.
    pub const fn ticks(self) -> Ticks {
        match self {
            Unit::Seconds => TICKS_PER_SECOND,
            Unit::Milliseconds => TICKS_PER_MILLISECOND,
            Unit::Microseconds => TICKS_PER_MICROSECOND,
        }
    }
}

/// How a span is turned into a whole number of units for a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// redis-cell's rule: whole units, plus one when at least a thousandth of a unit is
    /// left over (in seconds: 0.9995 s -> 1, 2.0000 s -> 2, 0.0004 s -> 0).
    RedisCell,
    /// Up to the next whole unit, so that waiting that long is always enough.
    Up,
}

/// Expresses a span in whole `unit`s for a reply. Negative spans count as zero; spans beyond
/// `i64::MAX` units saturate.
pub fn span_in_units(span: Ticks, unit: Unit, rounding: Rounding) -> i64 {
    if span <= 0 {
        return 0;
    }
    if span >= 1 << 88 {
        return span_in_units_wide(span, unit, rounding);
    }
    // Below 2^88 ticks the whole nanoseconds fit a u64, and each unit is a constant
    // divisor: a multiplication instead of a 128-bit division routine. A thousandth of a
    // unit is a whole number of nanoseconds, so the rounding rules read the same in
    // nanoseconds (the ticks below a nanosecond only matter when rounding up).
    let (nanos, fraction) = split_nanos(span);
    let in_units = |per_unit: u64| {
        let (whole, left_over) = (nanos / per_unit, nanos % per_unit);
        let round_up = match rounding {
            Rounding::RedisCell => left_over >= per_unit / 1_000,
            Rounding::Up => left_over > 0 || fraction > 0,
        };
        // At most 2^64 / 1,000 units: within an i64.
        (whole + u64::from(round_up)) as i64
    };
    match unit {
        Unit::Seconds => in_units(1_000_000_000),
        Unit::Milliseconds => in_units(1_000_000),
        Unit::Microseconds => in_units(1_000),
    }
}

/// [`span_in_units`] for any span, in 128-bit arithmetic: the reference the fast path is
/// tested against, and the path of spans of 2^88 ticks or more.
fn span_in_units_wide(span: Ticks, unit: Unit, rounding: Rounding) -> i64 {
    let span = span.max(0);
    let per_unit = unit.ticks();
    let whole = span / per_unit;
    let left_over = span % per_unit;
    let round_up = match rounding {
        Rounding::RedisCell => left_over >= per_unit / 1_000,
        Rounding::Up => left_over > 0,
    };
    i64::try_from(whole + Ticks::from(round_up)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn redis_cell_rounding_ignores_less_than_a_thousandth_of_a_unit() {
        let s = Unit::Seconds;
        let r = Rounding::RedisCell;
        assert_eq!(span_in_units(TICKS_PER_MICROSECOND * 999_500, s, r), 1);
        assert_eq!(span_in_units(2 * TICKS_PER_SECOND, s, r), 2);
        assert_eq!(span_in_units(TICKS_PER_MICROSECOND * 400, s, r), 0);
        assert_eq!(span_in_units(TICKS_PER_MILLISECOND, s, r), 1);
        assert_eq!(span_in_units(TICKS_PER_MILLISECOND - 1, s, r), 0);
        assert_eq!(
            span_in_units(2 * TICKS_PER_SECOND + TICKS_PER_MILLISECOND, s, r),
            3
        );
        let ms = Unit::Milliseconds;
        assert_eq!(span_in_units(TICKS_PER_MICROSECOND * 1_001, ms, r), 2);
        assert_eq!(span_in_units(TICKS_PER_MICROSECOND * 1_000 + 5, ms, r), 1);
    }

    #[test]
    fn rounding_up_counts_any_left_over_tick() {
        let up = Rounding::Up;
        assert_eq!(span_in_units(0, Unit::Seconds, up), 0);
        assert_eq!(span_in_units(1, Unit::Seconds, up), 1);
        assert_eq!(span_in_units(TICKS_PER_SECOND, Unit::Seconds, up), 1);
        assert_eq!(span_in_units(TICKS_PER_SECOND + 1, Unit::Seconds, up), 2);
        assert_eq!(
            span_in_units(TICKS_PER_MILLISECOND * 1_500, Unit::Milliseconds, up),
            1_500
        );
        assert_eq!(
            span_in_units(TICKS_PER_NANOSECOND, Unit::Microseconds, up),
            1
        );
    }

    #[test]
    fn negative_spans_are_zero_and_huge_ones_saturate() {
        assert_eq!(span_in_units(-5, Unit::Seconds, Rounding::Up), 0);
        assert_eq!(
            span_in_units(Ticks::MAX, Unit::Microseconds, Rounding::Up),
            i64::MAX
        );
    }

    #[test]
    fn expiry_is_the_first_whole_millisecond_at_or_after_the_instant() {
        assert_eq!(ceil_millis(0), 0);
        assert_eq!(ceil_millis(1), 1);
        assert_eq!(ceil_millis(TICKS_PER_MILLISECOND), 1);
        assert_eq!(ceil_millis(TICKS_PER_MILLISECOND + 1), 2);
        assert_eq!(
            ceil_millis(from_micros(1_700_000_000_123_456)),
            1_700_000_000_124
        );
        assert_eq!(ceil_millis(MAX_INSTANT), 18_446_744_073_710);
    }

    /// The 128-bit forms the fast paths replace.
    fn ceil_millis_wide(instant: Ticks) -> i64 {
        let millis = instant.div_euclid(TICKS_PER_MILLISECOND)
            + Ticks::from(instant.rem_euclid(TICKS_PER_MILLISECOND) != 0);
        i64::try_from(millis).unwrap()
    }

    proptest! {
        #[test]
        fn fast_rounding_matches_the_128_bit_arithmetic(
            span in prop_oneof![
                -1_000i128..1_000,
                0..(1i128 << 88) + 1_000,
                // Near whole units and their thousandths, where the rules differ.
                (0i128..1 << 20, -3i128..3, 0usize..4).prop_map(|(n, off, unit)| {
                    [TICKS_PER_SECOND / 1_000, TICKS_PER_MILLISECOND, TICKS_PER_SECOND,
                        TICKS_PER_MICROSECOND][unit] * n + off
                }),
                proptest::num::i128::ANY,
            ],
        ) {
            for unit in [Unit::Seconds, Unit::Milliseconds, Unit::Microseconds] {
                for rounding in [Rounding::RedisCell, Rounding::Up] {
                    prop_assert_eq!(
                        span_in_units(span, unit, rounding),
                        span_in_units_wide(span, unit, rounding),
                        "{} {:?} {:?}", span, unit, rounding
                    );
                }
            }
            if (0..=MAX_INSTANT).contains(&span) {
                prop_assert_eq!(ceil_millis(span), ceil_millis_wide(span));
            }
        }
    }

    #[test]
    fn the_largest_span_from_any_clock_reading_still_fits_an_instant() {
        // i64 microseconds reach the year 294,247; but a clock reading of the year 2262
        // (i64 nanoseconds) plus the largest span is still below MAX_INSTANT.
        let year_2262 = i64::MAX as Ticks * TICKS_PER_NANOSECOND;
        assert!(year_2262 + MAX_SPAN <= MAX_INSTANT);
    }
}
