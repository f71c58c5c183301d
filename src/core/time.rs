//! Time as the cores see it, in three units that do not mix: [`Micros`] (the server clock's
//! resolution: instants since the Unix epoch and spans), [`Millis`] (a key's absolute expiry)
//! and [`Ticks`] of 2^-24 nanoseconds (GCRA's instants and spans).
//!
//! The server clock only has microsecond precision, but rates are `count / period`, and an
//! emission interval such as 1 s / 3 or 1 s / 3,000,000 is not a whole number of
//! nanoseconds. Counting in sub-nanosecond ticks keeps such intervals exact to within
//! 2^-24 ns, so the long-run rate matches the configured one even above a billion per second.

//!
//! The fields are private: a value is made by a checked constructor (`new`, `None` out of
//! range, for what is read from stored bytes or an effect), a clamping one (`saturating`,
//! for what is computed), or arithmetic, which saturates at the bounds. Every value then
//! lies within its type's bounds, so no arithmetic on times can overflow, whatever a key or
//! an AOF holds.

use std::ops::{Add, Sub};

/// Microseconds: an instant since the Unix epoch, or a span; never beyond
/// [`Micros::LATEST`] either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Micros(i64);

/// Milliseconds since the Unix epoch: when a key expires. Never negative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(i64);

/// An instant since the Unix epoch, or a span, in ticks of 2^-24 ns; never beyond
/// [`Ticks::LIMIT`] either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticks(i128);

/// Ticks in one nanosecond.
const PER_NANOSECOND: i128 = 1 << 24;
/// Ticks in one microsecond.
const PER_MICROSECOND: i128 = 1_000 * PER_NANOSECOND;

impl Ticks {
    /// No time.
    pub const ZERO: Ticks = Ticks(0);

    /// The bound of every value, either way: 2^120 ticks, far beyond any instant or span a
    /// limiter holds (2^88), so that a product of a span by a count that fits is still
    /// representable, and a sum of two values never overflows.
    pub const LIMIT: Ticks = Ticks(1 << 120);

    /// `raw` ticks, when within [`Ticks::LIMIT`].
    pub const fn new(raw: i128) -> Option<Ticks> {
        if raw.unsigned_abs() <= Ticks::LIMIT.0 as u128 {
            Some(Ticks(raw))
        } else {
            None
        }
    }

    /// `raw` ticks, clamped to [`Ticks::LIMIT`] either way.
    pub const fn saturating(raw: i128) -> Ticks {
        if raw > Ticks::LIMIT.0 {
            Ticks::LIMIT
        } else if raw < -Ticks::LIMIT.0 {
            Ticks(-Ticks::LIMIT.0)
        } else {
            Ticks(raw)
        }
    }

    /// The ticks.
    pub const fn get(self) -> i128 {
        self.0
    }

    /// One nanosecond.
    pub const NANOSECOND: Ticks = Ticks(PER_NANOSECOND);
    /// One microsecond.
    pub const MICROSECOND: Ticks = Ticks(PER_MICROSECOND);
    /// One millisecond.
    pub const MILLISECOND: Ticks = Ticks(1_000 * PER_MICROSECOND);
    /// One second.
    pub const SECOND: Ticks = Ticks(1_000_000 * PER_MICROSECOND);

    /// The longest span a limiter may cover: 2^63 - 1 ns, about 292 years.
    ///
    /// Bounding spans keeps every stored instant below [`Ticks::LATEST`] (the clock is
    /// centuries away from it) and every time in a reply within an `i64`, whatever the unit.
    pub const MAX_SPAN: Ticks = Ticks(i64::MAX as i128 * PER_NANOSECOND);

    /// The latest instant a value may hold: 2^88 - 1 ticks, in the year 2554.
    pub const LATEST: Ticks = Ticks((1 << 88) - 1);

    /// `n` times this span; `None` beyond [`Ticks::LIMIT`].
    pub fn checked_times(self, n: u64) -> Option<Ticks> {
        self.0.checked_mul(i128::from(n)).and_then(Ticks::new)
    }

    /// `n` times this span, clamped to [`Ticks::LIMIT`] (which a caller that checked its
    /// `n` never reaches).
    pub fn times(self, n: u64) -> Ticks {
        Ticks::saturating(self.0.saturating_mul(i128::from(n)))
    }

    /// The whole microseconds of a span, rounded up: how long to wait, in the clock's unit.
    pub fn ceil_micros(self) -> Micros {
        let micros = self.0.div_euclid(PER_MICROSECOND)
            + i128::from(self.0.rem_euclid(PER_MICROSECOND) != 0);
        Micros::saturating(micros.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
    }

    /// The first whole millisecond at or after this instant: where a key's expiry goes so
    /// that it never disappears before the state it holds stops mattering.
    pub fn ceil_millis(self) -> Millis {
        // Every instant from 0 to LATEST has its whole nanoseconds below 2^64: the division
        // is then by a constant, in 64 bits (a multiplication), where i128 would call a
        // division routine.
        if (0..=Ticks::LATEST.0).contains(&self.0) {
            let (nanos, fraction) = self.split_nanos();
            let millis = nanos / 1_000_000 + u64::from(nanos % 1_000_000 != 0 || fraction != 0);
            return Millis(millis as i64); // At most 2^64 / 10^6.
        }
        let per_milli = Ticks::MILLISECOND.0;
        let millis = self.0.div_euclid(per_milli) + i128::from(self.0.rem_euclid(per_milli) != 0);
        Millis::saturating(millis.clamp(0, i128::from(i64::MAX)) as i64)
    }

    /// The whole nanoseconds of a value from 0 to 2^88 - 1, and the ticks left over.
    fn split_nanos(self) -> (u64, u64) {
        debug_assert!((0..1 << 88).contains(&self.0));
        (
            (self.0 >> 24) as u64,
            self.0 as u64 & (PER_NANOSECOND as u64 - 1),
        )
    }

    /// This span in whole `unit`s for a reply. Negative spans count as zero; spans beyond
    /// `i64::MAX` units saturate.
    pub fn in_units(self, unit: Unit, rounding: Rounding) -> i64 {
        if self.0 <= 0 {
            return 0;
        }
        if self.0 >= 1 << 88 {
            return self.in_units_wide(unit, rounding);
        }
        // Below 2^88 ticks the whole nanoseconds fit a u64, and each unit is a constant
        // divisor: a multiplication instead of a 128-bit division routine. A thousandth of
        // a unit is a whole number of nanoseconds, so the rounding rules read the same in
        // nanoseconds (the ticks below a nanosecond only matter when rounding up).
        let (nanos, fraction) = self.split_nanos();
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

    /// [`Ticks::in_units`] for any span, in 128-bit arithmetic: the reference the fast path
    /// is tested against, and the path of spans of 2^88 ticks or more.
    fn in_units_wide(self, unit: Unit, rounding: Rounding) -> i64 {
        let span = self.0.max(0);
        let per_unit = unit.ticks().0;
        let (whole, left_over) = (span / per_unit, span % per_unit);
        let round_up = match rounding {
            Rounding::RedisCell => left_over >= per_unit / 1_000,
            Rounding::Up => left_over > 0,
        };
        i64::try_from(whole + i128::from(round_up)).unwrap_or(i64::MAX)
    }
}

/// Saturates at [`Ticks::LIMIT`]: two values within it never overflow an `i128`.
impl Add for Ticks {
    type Output = Ticks;
    fn add(self, other: Ticks) -> Ticks {
        Ticks::saturating(self.0 + other.0)
    }
}

/// Saturates at [`Ticks::LIMIT`], as `+`.
impl Sub for Ticks {
    type Output = Ticks;
    fn sub(self, other: Ticks) -> Ticks {
        Ticks::saturating(self.0 - other.0)
    }
}

impl Micros {
    /// No time.
    pub const ZERO: Micros = Micros(0);

    /// The latest instant, and the longest span either way: 2^63 - 1 ns in whole
    /// microseconds (the year 2262), where the server's clock readings are capped, so that
    /// every instant a limiter derives from one stays representable in its ticks.
    pub const LATEST: Micros = Micros(i64::MAX / 1_000);

    /// `micros`, when within [`Micros::LATEST`] either way.
    pub const fn new(micros: i64) -> Option<Micros> {
        if micros.unsigned_abs() <= Micros::LATEST.0 as u64 {
            Some(Micros(micros))
        } else {
            None
        }
    }

    /// `micros` as an instant: `None` before the epoch or after [`Micros::LATEST`].
    pub const fn instant(micros: i64) -> Option<Micros> {
        if micros >= 0 {
            Micros::new(micros)
        } else {
            None
        }
    }

    /// `micros`, clamped to [`Micros::LATEST`] either way.
    pub const fn saturating(micros: i64) -> Micros {
        if micros > Micros::LATEST.0 {
            Micros::LATEST
        } else if micros < -Micros::LATEST.0 {
            Micros(-Micros::LATEST.0)
        } else {
            Micros(micros)
        }
    }

    /// The microseconds.
    pub const fn get(self) -> i64 {
        self.0
    }

    /// The same instant or span in ticks.
    pub const fn ticks(self) -> Ticks {
        Ticks(self.0 as i128 * PER_MICROSECOND)
    }

    /// The first whole millisecond at or after this instant.
    pub fn ceil_millis(self) -> Millis {
        Millis::saturating(self.0.div_euclid(1_000) + i64::from(self.0.rem_euclid(1_000) != 0))
    }

    /// `self + other`, at most [`Micros::LATEST`] (as `+`).
    pub fn saturating_add(self, other: Micros) -> Micros {
        self + other
    }

    /// The later of this instant and the epoch: what the cores compute with, whatever a
    /// stepped-back clock says.
    pub fn not_before_epoch(self) -> Micros {
        Micros(self.0.max(0))
    }
}

/// Saturates at [`Micros::LATEST`]: two values within it never overflow an `i64`.
impl Add for Micros {
    type Output = Micros;
    fn add(self, other: Micros) -> Micros {
        Micros::saturating(self.0 + other.0)
    }
}

/// Saturates at [`Micros::LATEST`], as `+`.
impl Sub for Micros {
    type Output = Micros;
    fn sub(self, other: Micros) -> Micros {
        Micros::saturating(self.0 - other.0)
    }
}

impl Millis {
    /// `millis` since the epoch, when not negative.
    pub const fn new(millis: i64) -> Option<Millis> {
        if millis >= 0 {
            Some(Millis(millis))
        } else {
            None
        }
    }

    /// `millis` since the epoch, or the epoch for a negative value.
    pub const fn saturating(millis: i64) -> Millis {
        if millis < 0 {
            Millis(0)
        } else {
            Millis(millis)
        }
    }

    /// The milliseconds.
    pub const fn get(self) -> i64 {
        self.0
    }
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
    /// One of this unit, in ticks.
    pub const fn ticks(self) -> Ticks {
        match self {
            Unit::Seconds => Ticks::SECOND,
            Unit::Milliseconds => Ticks::MILLISECOND,
            Unit::Microseconds => Ticks::MICROSECOND,
        }
    }

    /// Microseconds in one of this unit.
    pub const fn micros(self) -> i64 {
        match self {
            Unit::Seconds => 1_000_000,
            Unit::Milliseconds => 1_000,
            Unit::Microseconds => 1,
        }
    }

    /// `amount` of this unit in microseconds, when that is at most [`Ticks::MAX_SPAN`].
    pub fn span(self, amount: i64) -> Option<Micros> {
        amount
            .checked_mul(self.micros())
            .filter(|&micros| micros <= MAX_SPAN_MICROS)
            .and_then(Micros::new)
    }
}

/// [`Ticks::MAX_SPAN`] in whole microseconds.
pub const MAX_SPAN_MICROS: i64 = i64::MAX / 1_000;

/// How a span is turned into a whole number of units for a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// redis-cell's rule: whole units, plus one when at least a thousandth of a unit is
    /// left over (in seconds: 0.9995 s -> 1, 2.0000 s -> 2, 0.0004 s -> 0).
    RedisCell,
    /// Up to the next whole unit, so that waiting that long is always enough.
    Up,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn micros(micros: i64) -> Ticks {
        Micros(micros).ticks()
    }

    #[test]
    fn redis_cell_rounding_ignores_less_than_a_thousandth_of_a_unit() {
        let (s, r) = (Unit::Seconds, Rounding::RedisCell);
        assert_eq!(micros(999_500).in_units(s, r), 1);
        assert_eq!(Ticks(2 * Ticks::SECOND.0).in_units(s, r), 2);
        assert_eq!(micros(400).in_units(s, r), 0);
        assert_eq!(Ticks::MILLISECOND.in_units(s, r), 1);
        assert_eq!(Ticks(Ticks::MILLISECOND.0 - 1).in_units(s, r), 0);
        assert_eq!(micros(2_001_000).in_units(s, r), 3);
        let ms = Unit::Milliseconds;
        assert_eq!(micros(1_001).in_units(ms, r), 2);
        assert_eq!(Ticks(micros(1_000).0 + 5).in_units(ms, r), 1);
    }

    #[test]
    fn rounding_up_counts_any_left_over_tick() {
        let up = Rounding::Up;
        assert_eq!(Ticks(0).in_units(Unit::Seconds, up), 0);
        assert_eq!(Ticks(1).in_units(Unit::Seconds, up), 1);
        assert_eq!(Ticks::SECOND.in_units(Unit::Seconds, up), 1);
        assert_eq!(Ticks(Ticks::SECOND.0 + 1).in_units(Unit::Seconds, up), 2);
        assert_eq!(micros(1_500_000).in_units(Unit::Milliseconds, up), 1_500);
        assert_eq!(Ticks::NANOSECOND.in_units(Unit::Microseconds, up), 1);
    }

    #[test]
    fn negative_spans_are_zero_and_huge_ones_saturate() {
        assert_eq!(Ticks(-5).in_units(Unit::Seconds, Rounding::Up), 0);
        assert_eq!(
            Ticks(i128::MAX).in_units(Unit::Microseconds, Rounding::Up),
            i64::MAX
        );
    }

    #[test]
    fn expiry_is_the_first_whole_millisecond_at_or_after_the_instant() {
        assert_eq!(Ticks(0).ceil_millis(), Millis(0));
        assert_eq!(Ticks(1).ceil_millis(), Millis(1));
        assert_eq!(Ticks::MILLISECOND.ceil_millis(), Millis(1));
        assert_eq!(Ticks(Ticks::MILLISECOND.0 + 1).ceil_millis(), Millis(2));
        assert_eq!(
            micros(1_700_000_000_123_456).ceil_millis(),
            Millis(1_700_000_000_124)
        );
        assert_eq!(
            Micros(1_700_000_000_123_456).ceil_millis(),
            Millis(1_700_000_000_124)
        );
        assert_eq!(Micros(-1).ceil_millis(), Millis(0));
        assert_eq!(Ticks::LATEST.ceil_millis(), Millis(18_446_744_073_710));
    }

    #[test]
    fn spans_of_a_unit_are_bounded_by_the_longest_span() {
        assert_eq!(Unit::Seconds.span(3), Some(Micros(3_000_000)));
        assert_eq!(
            Unit::Microseconds.span(MAX_SPAN_MICROS),
            Some(Micros(MAX_SPAN_MICROS))
        );
        assert_eq!(Unit::Microseconds.span(MAX_SPAN_MICROS + 1), None);
        assert_eq!(Unit::Seconds.span(i64::MAX), None);
        assert_eq!(micros(7).ceil_micros(), Micros(7));
        assert_eq!(Ticks(micros(7).0 + 1).ceil_micros(), Micros(8));
    }

    /// The 128-bit form the fast path replaces.
    fn ceil_millis_wide(instant: Ticks) -> Millis {
        let per = Ticks::MILLISECOND.0;
        Millis(
            i64::try_from(instant.0.div_euclid(per) + i128::from(instant.0.rem_euclid(per) != 0))
                .unwrap(),
        )
    }

    proptest! {
        #[test]
        fn fast_rounding_matches_the_128_bit_arithmetic(
            span in prop_oneof![
                -1_000i128..1_000,
                0..(1i128 << 88) + 1_000,
                // Near whole units and their thousandths, where the rules differ.
                (0i128..1 << 20, -3i128..3, 0usize..4).prop_map(|(n, off, unit)| {
                    [Ticks::SECOND.0 / 1_000, Ticks::MILLISECOND.0, Ticks::SECOND.0,
                        Ticks::MICROSECOND.0][unit] * n + off
                }),
                proptest::num::i128::ANY,
            ],
        ) {
            for unit in [Unit::Seconds, Unit::Milliseconds, Unit::Microseconds] {
                for rounding in [Rounding::RedisCell, Rounding::Up] {
                    prop_assert_eq!(
                        Ticks(span).in_units(unit, rounding),
                        Ticks(span).in_units_wide(unit, rounding),
                        "{} {:?} {:?}", span, unit, rounding
                    );
                }
            }
            if (0..=Ticks::LATEST.0).contains(&span) {
                prop_assert_eq!(Ticks(span).ceil_millis(), ceil_millis_wide(Ticks(span)));
            }
        }
    }

    #[test]
    fn the_largest_span_from_any_clock_reading_still_fits_an_instant() {
        // i64 microseconds reach the year 294,247; but a clock reading of the year 2262
        // (i64 nanoseconds) plus the largest span is still below LATEST.
        let year_2262 = Ticks(i64::MAX as i128 * Ticks::NANOSECOND.0);
        assert!(year_2262 + Ticks::MAX_SPAN <= Ticks::LATEST);
    }
}
