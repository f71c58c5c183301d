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
    let millis = instant.div_euclid(TICKS_PER_MILLISECOND)
        + Ticks::from(instant.rem_euclid(TICKS_PER_MILLISECOND) != 0);
    i64::try_from(millis).expect("instants are bounded by MAX_INSTANT")
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

/// Expresses a span in whole `unit`s for a reply. Negative spans count as zero.
pub fn span_in_units(span: Ticks, unit: Unit, rounding: Rounding) -> i64 {
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

    #[test]
    fn the_largest_span_from_any_clock_reading_still_fits_an_instant() {
        // i64 microseconds reach the year 294,247; but a clock reading of the year 2262
        // (i64 nanoseconds) plus the largest span is still below MAX_INSTANT.
        let year_2262 = i64::MAX as Ticks * TICKS_PER_NANOSECOND;
        assert!(year_2262 + MAX_SPAN <= MAX_INSTANT);
    }
}
