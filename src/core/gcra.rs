//! GCRA, the generic cell rate algorithm: a leaky bucket kept as one instant, the
//! theoretical arrival time (TAT) of the next request if requests came exactly at the rate.
//!
//! With emission interval `T = period / count` and tolerance `tau = T * (max_burst + 1)`:
//! a request of quantity `q` at `now` moves the TAT to `max(tat, now) + T * q` and is
//! admitted when that new TAT minus `tau` is not after `now`. The bucket is full again (and
//! the state can be forgotten) once `now` reaches the TAT. This is redis-cell's algorithm;
//! the replies match it, without its overflow and rounding defects.
//!
//! With a warm-up (`WARMUP period`, Guava's `SmoothWarmingUp`), a limiter idle long enough
//! starts cold: each unit then costs more of the bucket, up to three times `T`, and the cost
//! falls linearly to `T` over `period` of sustained use. How cold it is, a span from 0 to
//! `period`, is kept beside the TAT: it grows by the time the limiter spends idle (past its
//! TAT) and falls by `T` per unit taken. Above half the period, a unit costs
//! `T * (4 * cold / period - 1)`; below, `T`. A missing key is the coldest.

use super::params::ParamError;
use super::time::{Micros, Ticks, Unit};
use super::verdict::{RetryAfter, Verdict};

/// A GCRA limiter's parameters, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    /// `T`: the time one unit of quantity occupies in the bucket.
    interval: Ticks,
    /// `tau`: the bucket's size in time, `interval * limit`.
    tolerance: Ticks,
    /// `max_burst + 1`: the most admitted at once.
    limit: i64,
    /// `WARMUP period`; `Ticks::ZERO` for none.
    warmup: Ticks,
}

/// A stored state: the TAT, and with a warm-up, how cold the limiter was at its TAT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcraState {
    /// The theoretical arrival time.
    pub tat: Ticks,
    /// How cold the limiter was at `tat`, from 0 (warm) to the warm-up period.
    pub cold: Ticks,
}

/// What a stored state was written under: the emission interval `T` of the parameters that
/// wrote it, to 11 significant bits and rounded up, in two bytes: a 6-bit exponent `e` and a
/// 10-bit mantissa `m`, standing for `(1024 + m) << (e + 14)` ticks (1 ns to 2^88 ticks).
/// A call whose own interval codes otherwise reads the state in requests
/// ([`Gcra::carried`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Basis(pub u16);

impl Basis {
    /// The basis of `interval`: the least code standing for at least it (shifts on 64 bits,
    /// not a division: every call computes one).
    pub fn of(interval: Ticks) -> Basis {
        let ticks = interval.get().clamp(1, (1 << 88) - 1) as u128;
        // Below 2^64 ticks (intervals up to about 18 minutes) as they are; above, the top 64
        // of the 88 bits, whether any bit below them is set kept apart.
        let (low, offset, sticky) = if ticks >> 64 == 0 {
            (ticks as u64, 0, false)
        } else {
            ((ticks >> 24) as u64, 24, ticks & ((1 << 24) - 1) != 0)
        };
        let bits = 64 - low.leading_zeros() as i32 + offset;
        // The exponent that puts `ticks >> (e + 14)` in [1024, 2048), at least 0.
        let mut exponent = (bits - 25).max(0);
        let shift = (exponent + 14 - offset) as u32;
        let rounded = sticky || low & ((1u64 << shift) - 1) != 0;
        let mut mantissa = (low >> shift) + u64::from(rounded);
        if mantissa < 1024 {
            mantissa = 1024;
        }
        if mantissa == 2048 {
            // Rounded up past the mantissa's range: the next exponent's 1024 stands for it.
            exponent += 1;
            mantissa = 1024;
        }
        if exponent > 63 {
            return Basis(u16::MAX);
        }
        Basis(((exponent as u16) << 10) | (mantissa as u16 - 1024))
    }

    /// The interval it stands for: at least the one it was made of.
    pub fn interval(self) -> Ticks {
        let exponent = i32::from(self.0 >> 10);
        let mantissa = i128::from(self.0 & 0x3FF) + 1024;
        Ticks::saturating(mantissa << (exponent + 14))
    }
}

/// What a state of 5fec6b4's layout was written under: the tolerance of its parameters, and
/// when ([`Gcra::carried_share`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareBasis {
    /// `tau` in whole nanoseconds.
    pub tolerance_nanos: u64,
    /// The instant the state was decided at.
    pub written_at: Micros,
}

/// The decision for one request and the state to store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraOutcome {
    /// The reply, before rounding.
    pub verdict: Verdict,
    /// The new state to store, or `None` when nothing changes: a refused request or a
    /// peek.
    pub new_state: Option<GcraState>,
}

impl Gcra {
    /// Validates redis-cell's parameters: `count` per `period` (in `unit`s), with bursts of
    /// up to `max_burst + 1`.
    ///
    /// The emission interval is rounded up to a whole tick (2^-24 ns), so the long-run rate
    /// never exceeds `count / period`.
    pub fn new(max_burst: i64, count: i64, period: i64, unit: Unit) -> Result<Gcra, ParamError> {
        if max_burst < 0 {
            return Err(ParamError::NegativeBurst);
        }
        if count <= 0 {
            return Err(ParamError::NonPositiveCount);
        }
        if period <= 0 {
            return Err(ParamError::NonPositivePeriod);
        }
        let limit = max_burst.checked_add(1).ok_or(ParamError::BurstTooLong)?;
        let interval = emission_interval(period, count, unit).ok_or(ParamError::RateTooHigh)?;
        let tolerance = interval
            .checked_times(limit as u64)
            .filter(|&tolerance| tolerance <= Ticks::MAX_SPAN)
            .ok_or(ParamError::BurstTooLong)?;
        Ok(Gcra {
            interval,
            tolerance,
            limit,
            warmup: Ticks::ZERO,
        })
    }

    /// The same limiter with a warm-up of `period` (positive, at most [`Ticks::MAX_SPAN`]).
    pub fn with_warmup(self, period: Ticks) -> Gcra {
        debug_assert!(period.get() > 0 && period <= Ticks::MAX_SPAN);
        Gcra {
            warmup: period,
            ..self
        }
    }

    /// Whether it has a warm-up: its state then keeps how cold it is.
    pub fn warms_up(&self) -> bool {
        self.warmup.get() > 0
    }

    /// When a stored state stops mattering: once the TAT has passed and, with a warm-up,
    /// the limiter has gone back to the coldest, it is the state of a missing key.
    pub fn state_end(&self, state: GcraState) -> Ticks {
        if self.warms_up() {
            state.tat + (self.warmup - state.cold).max(Ticks::ZERO)
        } else {
            state.tat
        }
    }

    /// How cold the limiter is at `now`, given its stored state (`None`: the coldest). 0
    /// without a warm-up.
    fn cold_at(&self, stored: Option<GcraState>, now: Ticks) -> Ticks {
        if !self.warms_up() {
            return Ticks::ZERO;
        }
        stored.map_or(self.warmup, |state| {
            let idle = (now - state.tat).max(Ticks::ZERO);
            (state.cold + idle).min(self.warmup)
        })
    }

    /// What `quantity` units cost of the bucket, `cold` as it is: `T` each, more for the
    /// units taken while colder than half the warm-up period (the area under the cost line
    /// between the coldness before and after). One unit never costs more than the whole
    /// bucket: with `max_burst` 0 or 1 a cold unit would otherwise never fit, and the limiter
    /// never warm up. `None` when it overflows.
    fn cost(&self, cold: Ticks, quantity: u64) -> Option<Ticks> {
        let cost = self.uncapped_cost(cold, quantity)?;
        Some(if quantity == 1 {
            cost.min(self.tolerance)
        } else {
            cost
        })
    }

    /// [`Gcra::cost`] without the cap on one unit.
    fn uncapped_cost(&self, cold: Ticks, quantity: u64) -> Option<Ticks> {
        let base = self.interval.checked_times(quantity)?;
        let above = cold.get() - self.warmup.get() / 2;
        if !self.warms_up() || above <= 0 {
            return Some(base);
        }
        // Units above the half-way line cost T more per half period of coldness above it:
        // between the line's height before (2 * above / period) and after. Floating point
        // for the product of two spans of up to 2^87 ticks; rounded up, so that a cost is
        // never under its exact value.
        let taken = base.get().min(above) as f64;
        let extra = 2.0 * taken * (2.0 * above as f64 - taken) / self.warmup.get() as f64;
        base.get()
            .checked_add(extra.ceil() as i128)
            .and_then(Ticks::new)
    }

    /// A `FORCE` take of `quantity` (at most 16 times the limit) on a limiter that warms up:
    /// admitted, and charged its whole cost at the present coldness, which later requests
    /// wait out (the TAT is the queue). A warming limiter is forced this way rather than a
    /// limit's worth at a time, since a cold limit's worth may never fit its bucket.
    pub fn force_warming(
        &self,
        stored: Option<GcraState>,
        now: Ticks,
        quantity: u64,
    ) -> GcraOutcome {
        debug_assert!(self.warms_up() && quantity > 0);
        let tat = stored.map_or(now, |stored| stored.tat.max(now));
        let cold = self.cold_at(stored, now);
        let cost = self
            .uncapped_cost(cold, quantity)
            .unwrap_or(Ticks::MAX_SPAN)
            .min(Ticks::MAX_SPAN);
        let new_tat = (tat + cost).min(Ticks::LATEST);
        let cold = (cold - self.interval.times(quantity)).max(Ticks::ZERO);
        let backlog = new_tat - now;
        GcraOutcome {
            verdict: Verdict {
                limited: false,
                limit: self.limit,
                remaining: self.remaining_cold(backlog, cold),
                retry_after: RetryAfter::NONE,
                reset_after: backlog,
            },
            new_state: Some(GcraState { tat: new_tat, cold }),
        }
    }

    /// `T`: the time one unit occupies in the bucket.
    #[cfg(test)]
    pub fn emission_interval(&self) -> Ticks {
        self.interval
    }

    /// The basis of a state these parameters write: their emission interval.
    pub fn basis(&self) -> Basis {
        Basis::of(self.interval)
    }

    /// The state a missing key stands for at any instant from the epoch on: nothing used
    /// (its TAT the epoch), and with a warm-up the coldest. Decided at such an instant, it
    /// gives what no state gives.
    pub fn missing_state(&self) -> GcraState {
        GcraState {
            tat: Ticks::ZERO,
            cold: self.warmup,
        }
    }

    /// Whether a state written under `basis` was written under this rate: `basis` is the
    /// one these parameters write (cheaper than computing theirs).
    #[inline]
    pub fn writes(&self, basis: Basis) -> bool {
        basis.interval() >= self.interval
            && (basis.0 == 0 || Basis(basis.0 - 1).interval() < self.interval)
    }

    /// A stored state as these parameters read it at `now`. Written under another emission
    /// interval (another rate), what was used is counted in requests: the backlog
    /// `tat - now`, read in the old interval, becomes the same number of requests at this
    /// one, at most the whole bucket (a lowered burst refuses until the level drains under
    /// it). A changed burst alone changes nothing of what was used: the interval is the
    /// same. The call that converts it stores it converted, admitted or refused, so the
    /// new rate drains it from then on and a refusal's `retry_after` holds.
    ///
    /// A state written under these parameters (the same basis), or by a layout that kept no
    /// basis (an earlier release's, redis-cell's), is read as it is. A state of 5fec6b4's
    /// layout kept the bucket's size and when it was written, not its rate: read under other
    /// parameters as the share of the bucket in use when written, carried to this one, as
    /// that release read it. The coldness of a warm-up is time, not requests: it is kept.
    #[inline]
    pub fn carried(&self, state: GcraState, basis: Option<Basis>, now: Ticks) -> GcraState {
        match basis {
            Some(basis) if !self.writes(basis) => self.converted(state, basis, now),
            _ => state,
        }
    }

    /// [`Gcra::carried`] for a state written under `basis`, another rate (the rare call).
    #[cold]
    fn converted(&self, state: GcraState, basis: Basis, now: Ticks) -> GcraState {
        let backlog = (state.tat - now).get().max(0);
        // A ratio of spans below 2^88 ticks: a double's 53 bits hold it to about 1 part in
        // 10^15, rounded up so that what was used is never under-counted beyond the basis's
        // rounding (which rounds the old interval up).
        let requests = backlog as f64 / basis.interval().get() as f64;
        let carried = (requests * self.interval.get() as f64).ceil() as i128;
        GcraState {
            tat: (now + Ticks::saturating(carried.min(self.tolerance.get()))).min(Ticks::LATEST),
            cold: state.cold,
        }
    }

    /// A state of 5fec6b4's layout ([`ShareBasis`]) as these parameters read it: the share
    /// of the bucket in use when it was written, carried to this bucket as of that instant.
    pub fn carried_share(&self, state: GcraState, basis: ShareBasis) -> GcraState {
        if basis.tolerance_nanos == self.tolerance_nanos() {
            return state;
        }
        let written_at = basis.written_at.ticks();
        let old = i128::from(basis.tolerance_nanos) * Ticks::NANOSECOND.get();
        let in_use = (state.tat - written_at).get().clamp(0, old);
        let share = if old == 0 {
            0.0
        } else {
            in_use as f64 / old as f64
        };
        let carried = (share * self.tolerance.get() as f64).ceil() as i128;
        GcraState {
            tat: (written_at + Ticks::saturating(carried.min(self.tolerance.get())))
                .min(Ticks::LATEST),
            cold: state.cold,
        }
    }

    /// `tau` in whole nanoseconds, as 5fec6b4's states kept it.
    fn tolerance_nanos(&self) -> u64 {
        (self.tolerance.get() / Ticks::NANOSECOND.get()) as u64
    }

    /// `max_burst + 1`: the largest quantity ever admitted at once.
    pub fn limit(&self) -> i64 {
        self.limit
    }

    /// Decides a request of `quantity` at `now`, given the stored state (`None` for a new
    /// or expired key). A `quantity` of 0 is a peek: it reports the state and never writes.
    #[inline(always)]
    pub fn apply(&self, stored: Option<GcraState>, now: Ticks, quantity: u64) -> GcraOutcome {
        if self.warms_up() {
            return self.apply_warming(stored, now, quantity);
        }
        let tat = stored.map_or(now, |stored| stored.tat.max(now));
        // How far the bucket is from full, in time: the current reset_after.
        let backlog = tat - now;
        let refuse = |retry_after| GcraOutcome {
            verdict: Verdict {
                limited: true,
                limit: self.limit,
                remaining: self.remaining(backlog),
                retry_after,
                reset_after: backlog,
            },
            new_state: None,
        };
        // Checked first: a quantity above the limit never fits, and T * quantity could
        // overflow.
        if quantity > self.limit as u64 {
            return refuse(RetryAfter::NONE);
        }
        let new_tat = tat + self.interval.times(quantity);
        let allow_at = new_tat - self.tolerance;
        if now < allow_at {
            return refuse(RetryAfter::of(allow_at - now));
        }
        let backlog = new_tat - now;
        GcraOutcome {
            verdict: Verdict {
                limited: false,
                limit: self.limit,
                remaining: self.remaining(backlog),
                retry_after: RetryAfter::NONE,
                reset_after: backlog,
            },
            new_state: (quantity > 0).then_some(GcraState {
                tat: new_tat,
                cold: Ticks::ZERO,
            }),
        }
    }

    /// [`Gcra::apply`] with a warm-up: each unit costs what the coldness makes it.
    #[inline(never)]
    fn apply_warming(&self, stored: Option<GcraState>, now: Ticks, quantity: u64) -> GcraOutcome {
        let tat = stored.map_or(now, |stored| stored.tat.max(now));
        let cold = self.cold_at(stored, now);
        let backlog = tat - now;
        let refuse = |retry_after| GcraOutcome {
            verdict: Verdict {
                limited: true,
                limit: self.limit,
                remaining: self.remaining_cold(backlog, cold),
                retry_after,
                reset_after: backlog,
            },
            new_state: None,
        };
        let cost = match self.cost(cold, quantity) {
            Some(cost) if quantity <= self.limit as u64 => cost,
            _ => return refuse(RetryAfter::NONE),
        };
        let new_tat = tat + cost;
        let allow_at = new_tat - self.tolerance;
        if now < allow_at {
            // It fits once the backlog drains, while it is no colder: unless it costs more
            // than the whole bucket at this coldness (a cold limiter's idle only cools it).
            let fits = cost <= self.tolerance;
            return refuse((fits.then(|| allow_at - now)).into());
        }
        let backlog = new_tat - now;
        let cold = (cold - self.interval.times(quantity)).max(Ticks::ZERO);
        GcraOutcome {
            verdict: Verdict {
                limited: false,
                limit: self.limit,
                remaining: self.remaining_cold(backlog, cold),
                retry_after: RetryAfter::NONE,
                reset_after: backlog,
            },
            new_state: (quantity > 0).then_some(GcraState { tat: new_tat, cold }),
        }
    }

    /// Gives back `quantity` at `now`: the TAT moves back by `quantity` emission intervals,
    /// never before `now`, so a refund never gives more than a full bucket. The verdict is
    /// the standing after, as a peek sees it; `new_tat` is `Some` when the state changed (a
    /// missing or already full bucket has nothing to give back).
    pub fn refund(&self, stored: Option<GcraState>, now: Ticks, quantity: u64) -> GcraOutcome {
        let tat = stored.map_or(now, |stored| stored.tat.max(now));
        let cold = self.cold_at(stored, now);
        let back = self.interval.checked_times(quantity);
        let new_tat = back.map_or(now, |back| (tat - back).max(now));
        let after = GcraState { tat: new_tat, cold };
        GcraOutcome {
            verdict: self.apply(Some(after), now, 0).verdict,
            new_state: (new_tat < tat).then_some(after),
        }
    }

    /// Whole units of quantity that still fit in the bucket: at most `limit`, never negative
    /// (the bucket can be over-full after its parameters were tightened).
    fn remaining(&self, backlog: Ticks) -> i64 {
        let room = self.tolerance - backlog;
        if room.get() <= 0 {
            0
        } else {
            // room <= tolerance = interval * limit, so this is at most limit.
            whole_intervals(room, self.interval)
        }
    }

    /// [`Gcra::remaining`], `cold` as it is: colder units cost more, so the most whose cost
    /// fits, at most what fits warm.
    fn remaining_cold(&self, backlog: Ticks, cold: Ticks) -> i64 {
        let warm = self.remaining(backlog);
        if cold.get() <= self.warmup.get() / 2 {
            return warm;
        }
        let room = self.tolerance - backlog;
        let fits = |units: i64| {
            self.cost(cold, units as u64)
                .is_some_and(|cost| cost <= room)
        };
        let (mut low, mut high) = (0, warm);
        while low < high {
            let middle = low + (high - low + 1) / 2;
            if fits(middle) {
                low = middle;
            } else {
                high = middle - 1;
            }
        }
        low
    }
}

/// `room / interval` rounded down, for a positive `room` below 2^88 ticks and a positive
/// `interval`, whose quotient fits an i64.
///
/// Both usually fit 64 bits (spans under 18 minutes): one 64-bit division. Otherwise their
/// whole nanoseconds give an estimate, which a 128-bit multiplication confirms or moves by
/// one; a 128-bit division (a routine, about four times the cost) only when that fails.
fn whole_intervals(room: Ticks, interval: Ticks) -> i64 {
    debug_assert!(room.get() > 0 && room.get() < 1 << 88 && interval.get() > 0);
    let (room, interval) = (room.get() as u128, interval.get() as u128);
    if (room | interval) >> 64 == 0 {
        return (room as u64 / interval as u64) as i64;
    }
    let (room_ns, interval_ns) = ((room >> 24) as u64, (interval >> 24) as u64);
    if let Some(estimate) = room_ns.checked_div(interval_ns) {
        let estimate = u128::from(estimate);
        // The estimate is at most about twice the quotient: these products stay far
        // inside u128.
        for quotient in [estimate, estimate.wrapping_sub(1), estimate + 1] {
            let low = quotient.wrapping_mul(interval);
            if quotient <= estimate + 1 && low <= room && room - low < interval {
                return quotient as i64;
            }
        }
    }
    (room / interval) as i64
}

/// `period` `unit`s divided by `count`, in ticks, rounded up to a whole tick; `None` when
/// that is below one tick. Both arguments are positive.
fn emission_interval(period: i64, count: i64, unit: Unit) -> Option<Ticks> {
    let (period, count) = (period as u64, count as u64);
    let nanos_per_unit = (unit.ticks().get() / Ticks::NANOSECOND.get()) as u64;
    // The usual case in 64-bit divisions: `period` in nanoseconds fits a u64, and `count`
    // is below 2^40, so the ticks left over after whole nanoseconds (under 2^24 of them per
    // unit of count) do too. A tick is 2^-24 ns: whole ns / count, then the remainder's
    // ticks / count, rounded up.
    if let Some(nanos) = period
        .checked_mul(nanos_per_unit)
        .filter(|_| count < 1 << 40)
    {
        let (whole, left_over) = (nanos / count, nanos % count);
        if whole == 0 && left_over << 24 < count {
            return None;
        }
        return Some(Ticks::saturating(
            (i128::from(whole) << 24) + i128::from((left_over << 24).div_ceil(count)),
        ));
    }
    emission_interval_wide(period, count, unit)
}

/// [`emission_interval`] in 128-bit arithmetic, for any positive arguments: at most
/// `i64::MAX` seconds in ticks, about 1.5e35, far inside i128.
fn emission_interval_wide(period: u64, count: u64, unit: Unit) -> Option<Ticks> {
    let period = i128::from(period) * unit.ticks().get();
    let count = i128::from(count);
    (period >= count).then(|| Ticks::saturating((period + count - 1) / count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::time::{Micros, Rounding};
    use proptest::prelude::*;

    proptest! {
        /// A basis is the least code standing for at least its interval: computed by
        /// shifts, it is what the definition gives, searched.
        #[test]
        fn a_basis_is_the_least_code_at_least_its_interval(
            ticks in prop_oneof![1i128..1 << 30, 1i128..1 << 60, 1i128..1 << 87],
        ) {
            let basis = Basis::of(Ticks::saturating(ticks));
            prop_assert!(basis.interval().get() >= ticks);
            if basis.0 > 0 {
                prop_assert!(Basis(basis.0 - 1).interval().get() < ticks);
            }
            // And a limiter of that interval knows it for its own, and no other code.
            let gcra = Gcra { interval: Ticks::saturating(ticks), ..Gcra::new(0, 1, 1, Unit::Seconds).unwrap() };
            prop_assert!(gcra.writes(basis));
            prop_assert!(!gcra.writes(Basis(basis.0.wrapping_add(1))) || basis.0 == u16::MAX);
            prop_assert!(basis.0 == 0 || !gcra.writes(Basis(basis.0 - 1)));
        }
    }

    /// A limiter and its stored TAT, driven by a controlled clock.
    struct Bucket {
        gcra: Gcra,
        tat: Option<GcraState>,
    }

    impl Bucket {
        fn new(max_burst: i64, count: i64, period: i64) -> Bucket {
            Bucket {
                gcra: Gcra::new(max_burst, count, period, Unit::Seconds).unwrap(),
                tat: None,
            }
        }

        /// One call at `now`, replied in seconds as redis-cell does.
        fn call(&mut self, now: Ticks, quantity: u64) -> [i64; 5] {
            let outcome = self.gcra.apply(self.tat, now, quantity);
            if let Some(state) = outcome.new_state {
                self.tat = Some(state);
            }
            outcome.verdict.to_reply(Unit::Seconds, Rounding::RedisCell)
        }
    }

    const START: Ticks = Micros::saturating(1_700_000_000_000_000).ticks();

    /// A stored TAT, warm.
    fn warm(tat: Ticks) -> GcraState {
        GcraState {
            tat,
            cold: Ticks::ZERO,
        }
    }

    fn ms(millis: i64) -> Ticks {
        Micros::saturating(millis * 1_000).ticks()
    }

    /// redis-cell's own test table (src/cell/mod.rs, `it_rate_limits`), as replies.
    #[test]
    fn matches_redis_cell_on_its_controlled_clock_table() {
        let mut bucket = Bucket::new(4, 1, 1);
        let cases: [(Ticks, u64, [i64; 5]); 15] = [
            (START, 6, [1, 5, 5, -1, 0]),
            (START, 1, [0, 5, 4, -1, 1]),
            (START, 1, [0, 5, 3, -1, 2]),
            (START, 1, [0, 5, 2, -1, 3]),
            (START, 1, [0, 5, 1, -1, 4]),
            (START, 1, [0, 5, 0, -1, 5]),
            (START, 1, [1, 5, 0, 1, 5]),
            (START + ms(3_000), 1, [0, 5, 2, -1, 3]),
            (START + ms(3_100), 1, [0, 5, 1, -1, 4]),
            (START + ms(4_000), 1, [0, 5, 1, -1, 4]),
            (START + ms(8_000), 1, [0, 5, 4, -1, 1]),
            (START + ms(9_500), 1, [0, 5, 4, -1, 1]),
            (START + ms(9_500), 0, [0, 5, 4, -1, 1]),
            (START + ms(9_500), 2, [0, 5, 2, -1, 3]),
            (START + ms(9_500), 5, [1, 5, 2, 3, 3]),
        ];
        for (number, (now, quantity, expected)) in cases.into_iter().enumerate() {
            assert_eq!(bucket.call(now, quantity), expected, "case {number}");
        }
    }

    #[test]
    fn exact_times_behind_the_controlled_clock_table() {
        let gcra = Gcra::new(4, 1, 1, Unit::Seconds).unwrap();
        // After five at START and one at +3.0 s, the TAT is START + 6 s.
        let at = START + ms(3_100);
        let outcome = gcra.apply(Some(warm(START + ms(6_000))), at, 1);
        assert_eq!(
            outcome.new_state.map(|state| state.tat),
            Some(START + ms(7_000))
        );
        assert_eq!(outcome.verdict.reset_after, ms(3_900));
        assert_eq!(outcome.verdict.remaining, 1);
        // A request for five when only two fit: wait until three have leaked.
        let outcome = gcra.apply(Some(warm(START + ms(12_500))), START + ms(9_500), 5);
        assert!(outcome.verdict.limited);
        assert_eq!(outcome.verdict.retry_after, Some(ms(3_000)));
        assert_eq!(outcome.new_state.map(|state| state.tat), None);
    }

    /// The burst vectors of ../shared/notes/redis-cell.md: the clock barely moves (10 us a
    /// call here), as on a live server.
    #[test]
    fn matches_redis_cell_on_bursts() {
        let step = Micros::saturating(10).ticks();
        let run = |bucket: &mut Bucket, calls: &[(u64, [i64; 5])]| {
            let mut now = START;
            for (quantity, expected) in calls {
                assert_eq!(bucket.call(now, *quantity), *expected);
                now = now + step;
            }
        };
        run(&mut Bucket::new(15, 30, 60), &[(1, [0, 16, 15, -1, 2])]);
        run(&mut Bucket::new(4, 1, 1), &[(6, [1, 5, 5, -1, 0])]);
        run(
            &mut Bucket::new(4, 1, 1),
            &[
                (1, [0, 5, 4, -1, 1]),
                (1, [0, 5, 3, -1, 2]),
                (1, [0, 5, 2, -1, 3]),
                (1, [0, 5, 1, -1, 4]),
                (1, [0, 5, 0, -1, 5]),
                (1, [1, 5, 0, 1, 5]),
            ],
        );
        run(
            &mut Bucket::new(0, 1, 2),
            &[(1, [0, 1, 0, -1, 2]), (1, [1, 1, 0, 2, 2])],
        );
        run(&mut Bucket::new(5, 5, 3600), &[(1, [0, 6, 5, -1, 720])]);
    }

    #[test]
    fn a_peek_on_a_new_key_reports_a_full_bucket_and_writes_nothing() {
        let gcra = Gcra::new(4, 1, 1, Unit::Seconds).unwrap();
        let outcome = gcra.apply(None, START, 0);
        assert_eq!(outcome.new_state.map(|state| state.tat), None);
        assert_eq!(
            outcome.verdict.to_reply(Unit::Seconds, Rounding::RedisCell),
            [0, 5, 5, -1, 0]
        );
    }

    #[test]
    fn an_oversized_quantity_keeps_the_current_state() {
        let gcra = Gcra::new(4, 1, 1, Unit::Seconds).unwrap();
        let outcome = gcra.apply(Some(warm(START + ms(2_000))), START, 6);
        assert_eq!(outcome.new_state.map(|state| state.tat), None);
        assert_eq!(
            outcome.verdict.to_reply(Unit::Seconds, Rounding::RedisCell),
            [1, 5, 3, -1, 2]
        );
        let outcome = gcra.apply(None, START, u64::MAX);
        assert_eq!(outcome.verdict.remaining, 5);
        assert_eq!(outcome.verdict.retry_after, None);
    }

    #[test]
    fn a_refund_moves_the_tat_back_never_before_now() {
        let gcra = Gcra::new(4, 1, 1, Unit::Seconds).unwrap();
        // Three taken at START: the TAT is START + 3 s.
        let tat = START + ms(3_000);
        let outcome = gcra.refund(Some(warm(tat)), START, 2);
        assert_eq!(
            outcome.new_state.map(|state| state.tat),
            Some(START + ms(1_000))
        );
        assert_eq!(
            outcome.verdict.to_reply(Unit::Seconds, Rounding::RedisCell),
            [0, 5, 4, -1, 1]
        );
        // More than was taken: a full bucket, no more.
        let outcome = gcra.refund(Some(warm(tat)), START + ms(500), 100);
        assert_eq!(
            outcome.new_state.map(|state| state.tat),
            Some(START + ms(500))
        );
        assert_eq!(outcome.verdict.remaining, 5);
        // Nothing to give back: a missing key, or a full bucket.
        assert_eq!(
            gcra.refund(None, START, 1).new_state.map(|state| state.tat),
            None
        );
        assert_eq!(
            gcra.refund(Some(warm(START - ms(1))), START, 1)
                .new_state
                .map(|state| state.tat),
            None
        );
        assert_eq!(
            gcra.refund(Some(warm(tat)), START, 0)
                .new_state
                .map(|state| state.tat),
            None
        );
        // A huge quantity does not overflow.
        assert_eq!(
            gcra.refund(Some(warm(tat)), START, u64::MAX)
                .new_state
                .map(|state| state.tat),
            Some(START)
        );
    }

    #[test]
    fn a_stale_tat_counts_as_a_full_bucket() {
        let gcra = Gcra::new(4, 1, 1, Unit::Seconds).unwrap();
        let outcome = gcra.apply(Some(warm(START - ms(500))), START, 6);
        assert_eq!(outcome.verdict.remaining, 5);
        assert_eq!(outcome.verdict.reset_after, Ticks::ZERO);
    }

    #[test]
    fn milliseconds_give_sub_second_periods() {
        // 10 per 100 ms, burst 1: T = 10 ms.
        let gcra = Gcra::new(1, 10, 100, Unit::Milliseconds).unwrap();
        let first = gcra.apply(None, START, 1);
        assert_eq!(first.new_state.map(|state| state.tat), Some(START + ms(10)));
        let second = gcra.apply(first.new_state, START, 1);
        let third = gcra.apply(second.new_state, START, 1);
        assert!(third.verdict.limited);
        assert_eq!(
            third.verdict.to_reply(Unit::Milliseconds, Rounding::Up),
            [1, 2, 0, 10, 20]
        );
    }

    #[test]
    fn a_million_per_second_is_exact() {
        let gcra = Gcra::new(999, 1_000_000, 1, Unit::Seconds).unwrap();
        assert_eq!(gcra.interval, Ticks::MICROSECOND);
        let mut tat = None;
        let mut admitted = 0;
        for _ in 0..2_000 {
            let outcome = gcra.apply(tat, START, 1);
            assert!(outcome.verdict.remaining <= 1_000);
            if let Some(new_tat) = outcome.new_state.map(|state| state.tat) {
                tat = Some(warm(new_tat));
                admitted += 1;
            }
        }
        assert_eq!(admitted, 1_000);
        // One millisecond later exactly a thousand more fit.
        let later = START + ms(1);
        let peek = gcra.apply(tat, later, 0);
        assert_eq!(peek.verdict.remaining, 1_000);
    }

    #[test]
    fn fractional_intervals_keep_the_long_run_rate() {
        // 3 per second: T is 333,333,333.33 ns; a million requests take a million thirds of a
        // second, not a nanosecond more or less than a tick apiece.
        let gcra = Gcra::new(0, 3, 1, Unit::Seconds).unwrap();
        assert_eq!(
            gcra.interval,
            Ticks::saturating((Ticks::SECOND.get() + 2) / 3)
        );
        let mut tat = START;
        for _ in 0..1_000_000 {
            // Each request arrives exactly at the TAT, so each is admitted.
            tat = gcra
                .apply(Some(warm(tat)), tat, 1)
                .new_state
                .map(|state| state.tat)
                .unwrap();
        }
        let elapsed = tat - START;
        let exact = Ticks::saturating(1_000_000 * Ticks::SECOND.get() / 3);
        assert!(
            elapsed >= exact && (elapsed - exact).get() < 1_000_000,
            "{elapsed:?} vs {exact:?}"
        );
        // Rates above one per nanosecond stay exact too.
        let fast = Gcra::new(0, 3_000_000_000, 1, Unit::Seconds).unwrap();
        assert_eq!(
            fast.interval,
            Ticks::saturating((Ticks::NANOSECOND.get() + 2) / 3)
        );
    }

    #[test]
    fn refuses_parameters_it_cannot_honour() {
        let err = |b, c, p, u| Gcra::new(b, c, p, u).unwrap_err();
        assert_eq!(err(-1, 1, 1, Unit::Seconds), ParamError::NegativeBurst);
        assert_eq!(err(0, 0, 1, Unit::Seconds), ParamError::NonPositiveCount);
        assert_eq!(err(0, -3, 1, Unit::Seconds), ParamError::NonPositiveCount);
        assert_eq!(err(0, 1, 0, Unit::Seconds), ParamError::NonPositivePeriod);
        assert_eq!(err(0, 1, -60, Unit::Seconds), ParamError::NonPositivePeriod);
        assert_eq!(
            err(0, i64::MAX, 1, Unit::Microseconds),
            ParamError::RateTooHigh
        );
        assert_eq!(err(i64::MAX, 1, 1, Unit::Seconds), ParamError::BurstTooLong);
        assert_eq!(err(0, 1, i64::MAX, Unit::Seconds), ParamError::BurstTooLong);
        assert_eq!(
            err(i64::MAX - 1, 1, i64::MAX, Unit::Seconds),
            ParamError::BurstTooLong
        );
        // 292 years is the edge.
        assert!(Gcra::new(0, 1, 292 * 365 * 86_400, Unit::Seconds).is_ok());
        assert!(Gcra::new(0, 1, 293 * 365 * 86_400, Unit::Seconds).is_err());
        // The largest burst at a very high rate is fine; 2^24 per nanosecond is the edge.
        assert!(Gcra::new(i64::MAX - 1, 1_000_000_000_000_000, 1, Unit::Seconds).is_ok());
        assert!(Gcra::new(0, 16_777_216_000, 1, Unit::Microseconds).is_ok());
        assert_eq!(
            err(0, 16_777_216_001, 1, Unit::Microseconds),
            ParamError::RateTooHigh
        );
    }

    /// A stream of requests: (microseconds since the previous one, quantity).
    fn requests() -> impl Strategy<Value = Vec<(i64, u64)>> {
        prop::collection::vec((0i64..3_000_000, 0u64..8), 1..200)
    }

    /// Replays `stream` from START, storing the TAT of every admitted request, and shows
    /// `check` each call (its time, quantity and outcome). Returns the last TAT and time.
    fn replay(
        gcra: &Gcra,
        stream: &[(i64, u64)],
        mut check: impl FnMut(Ticks, u64, &GcraOutcome),
    ) -> (Option<GcraState>, Ticks) {
        let mut tat = None;
        let mut now = START;
        for &(gap, quantity) in stream {
            now = now + Micros::saturating(gap).ticks();
            let outcome = gcra.apply(tat, now, quantity);
            check(now, quantity, &outcome);
            tat = outcome.new_state.or(tat);
        }
        (tat, now)
    }

    #[test]
    fn an_interval_just_below_a_whole_nanosecond_more_rounds_up_to_it() {
        // Periods (in µs) whose nanoseconds leave `count - 1` over: the ticks left over
        // round up to a whole 2^24, a nanosecond more.
        for (count, period) in [
            (16_777_217, 9_277_801),
            (1_073_741_831, 76_235_670),
            (1_099_511_627_773, 920_291_232_446),
        ] {
            let interval = emission_interval(period, count, Unit::Microseconds).unwrap();
            assert_eq!(interval.get() % Ticks::NANOSECOND.get(), 0);
            assert_eq!(
                Some(interval),
                emission_interval_wide(period as u64, count as u64, Unit::Microseconds)
            );
        }
    }

    /// A warm-up limiter of `count` per second, bursts of `max_burst + 1`.
    fn warming(max_burst: i64, count: i64, warmup_ms: i64) -> Gcra {
        Gcra::new(max_burst, count, 1, Unit::Seconds)
            .unwrap()
            .with_warmup(ms(warmup_ms))
    }

    /// Requests admitted in each second of `seconds`, for a client asking for one unit every
    /// `every_ms` from START, on a limiter that starts cold.
    fn admitted_per_second(gcra: &Gcra, every_ms: i64, seconds: i64) -> Vec<u64> {
        let mut state = None;
        let mut counts = vec![0; seconds as usize];
        for step in 0..seconds * 1_000 / every_ms {
            let now = START + ms(step * every_ms);
            let outcome = gcra.apply(state, now, 1);
            if let Some(after) = outcome.new_state {
                state = Some(after);
                counts[(step * every_ms / 1_000) as usize] += 1;
            }
        }
        counts
    }

    #[test]
    fn a_cold_limiter_costs_up_to_three_intervals_a_unit() {
        let gcra = warming(9, 10, 10_000);
        let interval = ms(100);
        let first = gcra.apply(None, START, 1).new_state.unwrap();
        // The first unit's cost: the area under the cost line from 3 T down over one unit.
        let cost = first.tat - START;
        assert!(
            cost > interval.times(3) - ms(3) && cost <= interval.times(3),
            "{cost:?}"
        );
        assert_eq!(first.cold, ms(10_000 - 100));
        // Cold, the bucket of ten takes three at once; warm, all ten.
        assert_eq!(gcra.apply(None, START, 0).verdict.remaining, 3);
        let warm = GcraState {
            tat: START,
            cold: Ticks::ZERO,
        };
        assert_eq!(gcra.apply(Some(warm), START, 0).verdict.remaining, 10);
        // Without a warm-up, a missing key is simply full.
        let plain = Gcra::new(9, 10, 1, Unit::Seconds).unwrap();
        assert_eq!(plain.apply(None, START, 0).verdict.remaining, 10);
    }

    #[test]
    fn sustained_use_warms_it_over_the_period_and_idleness_cools_it() {
        let gcra = warming(9, 10, 10_000);
        let counts = admitted_per_second(&gcra, 10, 14);
        // A third of the burst at once, then from under half the rate up to the full rate
        // by the end of the period.
        assert!(counts[0] >= 3 && counts[0] <= 8, "{counts:?}");
        assert!(counts[1] <= 5, "{counts:?}");
        assert!(
            counts[1..].windows(2).all(|pair| pair[1] + 1 >= pair[0]),
            "{counts:?}"
        );
        assert!(counts[9..].iter().all(|&count| count == 10), "{counts:?}");
        let total_warming: u64 = counts[..10].iter().sum();
        assert!(total_warming < 80, "{counts:?}");
        // Left idle for the period, it is as cold as a new key.
        let mut state = None;
        for step in 0..1_400 {
            let outcome = gcra.apply(state, START + ms(step * 10), 1);
            state = outcome.new_state.or(state);
        }
        let idle = START + ms(14_000 + 10_000 + 1_000);
        assert_eq!(
            gcra.apply(state, idle, 0).verdict,
            gcra.apply(None, idle, 0).verdict
        );
    }

    /// One unit never costs more than the whole bucket: a cold limiter of bursts of 1 or 2
    /// still admits single units, and so warms up (it never would if a unit could cost more
    /// than the bucket holds), its cold units a bucket apart.
    #[test]
    fn a_small_bucket_admits_while_cold_and_warms() {
        for max_burst in [0, 1] {
            let gcra = warming(max_burst, 10, 10_000);
            let first = gcra.apply(None, START, 1);
            assert!(!first.verdict.limited, "max_burst {max_burst}");
            let bucket = ms(100).times(max_burst as u64 + 1);
            assert_eq!(first.new_state.unwrap().tat - START, bucket);
            let counts = admitted_per_second(&gcra, 10, 14);
            assert!(counts[0] >= 1, "{counts:?}");
            assert!(counts[12..].iter().all(|&count| count == 10), "{counts:?}");
        }
    }

    /// Forced while cold, a warming limiter is charged the request's whole cold cost.
    #[test]
    fn a_forced_take_pays_its_cold_cost() {
        let gcra = warming(1, 10, 10_000);
        let forced = gcra.force_warming(None, START, 4);
        assert!(!forced.verdict.limited);
        let state = forced.new_state.unwrap();
        let cost = gcra.uncapped_cost(ms(10_000), 4).unwrap();
        assert_eq!(state.tat - START, cost);
        assert!(cost > ms(400) && cost <= ms(1_200), "{cost:?}");
        assert_eq!(state.cold, ms(10_000 - 400));
        // Nothing fits until the debt is paid down to a bucket.
        let next = gcra.apply(Some(state), START + ms(100), 1);
        assert!(next.verdict.limited);
        // It fits once the TAT, with its own cost, is back within the bucket of two.
        let unit = gcra.cost(state.cold, 1).unwrap();
        assert_eq!(next.verdict.retry_after, Some(cost + unit - ms(300)));
    }

    /// The ramp docs/commands/cl.throttle.md shows, computed here.
    #[test]
    fn the_documented_warm_up_ramp_is_this_one() {
        let gcra = warming(9, 10, 10_000);
        let counts = admitted_per_second(&gcra, 10, 12);
        let mut table = String::from("| Second | Admitted |\n|---:|---:|\n");
        for (second, count) in counts.iter().enumerate() {
            table.push_str(&format!("| {} | {} |\n", second + 1, count));
        }
        let doc = include_str!("../../docs/commands/cl.throttle.md");
        assert!(doc.contains(&table), "the page should hold:\n{table}");
    }

    proptest! {
        #[test]
        fn whole_intervals_match_the_128_bit_division(
            interval in prop_oneof![1i128..1 << 30, 1i128..1 << 64, 1i128..1 << 87],
            quotient in prop_oneof![0i128..100, 0i128..1 << 24, 0i128..1 << 40],
            offset in 0.0f64..1.0,
        ) {
            let room = quotient * interval + (offset * interval as f64) as i128;
            prop_assume!(room > 0 && room < 1 << 88);
            prop_assert_eq!(
                whole_intervals(Ticks::saturating(room), Ticks::saturating(interval)) as i128,
                room / interval
            );
        }
    }

    proptest! {
        #[test]
        fn the_emission_interval_matches_the_128_bit_division(
            period in prop_oneof![1i64..100_000, 1i64..=i64::MAX],
            count in prop_oneof![1i64..100_000, 1i64..1 << 41, 1i64..=i64::MAX],
        ) {
            for unit in [Unit::Seconds, Unit::Milliseconds, Unit::Microseconds] {
                prop_assert_eq!(
                    emission_interval(period, count, unit),
                    emission_interval_wide(period as u64, count as u64, unit)
                );
            }
        }
    }

    proptest! {
        /// GCRA's bound: between any two admitted requests at t_i <= t_j, the admitted
        /// quantity is at most (t_j - t_i + tau) / T.
        #[test]
        fn never_admits_more_than_the_rate_allows(
            max_burst in 0i64..10,
            count in 1i64..50,
            period in 1i64..5,
            stream in requests(),
        ) {
            let gcra = Gcra::new(max_burst, count, period, Unit::Seconds).unwrap();
            let mut admitted: Vec<(Ticks, u64)> = Vec::new();
            replay(&gcra, &stream, |now, quantity, outcome| {
                let verdict = outcome.verdict;
                assert!(verdict.remaining >= 0 && verdict.remaining <= verdict.limit);
                assert!(verdict.reset_after.get() >= 0 && verdict.reset_after <= gcra.tolerance);
                if !verdict.limited && quantity > 0 {
                    assert_eq!(outcome.new_state.map(|state| state.tat), Some(now + verdict.reset_after));
                    admitted.push((now, quantity));
                } else {
                    assert_eq!(outcome.new_state.map(|state| state.tat), None);
                }
            });
            for i in 0..admitted.len() {
                let mut total = 0u64;
                for &(at, quantity) in &admitted[i..] {
                    total += quantity;
                    let bound = (at - admitted[i].0 + gcra.tolerance).get() / gcra.interval.get();
                    prop_assert!(i128::from(total) <= bound);
                }
            }
        }

        /// retry_after is exact: waiting it admits the same request, a tick less does not;
        /// after reset_after the bucket is full again.
        #[test]
        fn retry_and_reset_times_are_exact(
            max_burst in 0i64..10,
            count in 1i64..50,
            period in 1i64..5,
            stream in requests(),
            quantity in 1u64..12,
        ) {
            let gcra = Gcra::new(max_burst, count, period, Unit::Seconds).unwrap();
            let (tat, now) = replay(&gcra, &stream, |_, _, _| {});
            let verdict = gcra.apply(tat, now, quantity).verdict;
            if let Some(wait) = verdict.retry_after.get() {
                prop_assert!(verdict.limited);
                prop_assert!(!gcra.apply(tat, now + wait, quantity).verdict.limited);
                prop_assert!(gcra.apply(tat, now + wait - Ticks::saturating(1), quantity).verdict.limited);
            }
            let full = gcra.apply(tat, now + gcra.apply(tat, now, 0).verdict.reset_after, 0);
            prop_assert_eq!(full.verdict.remaining, gcra.limit());
        }

        /// A missing key decides as its `missing_state` at any instant from the epoch on
        /// (what the decision hands over instead of `None`), with or without a warm-up.
        #[test]
        fn the_missing_state_decides_as_no_state(
            max_burst in 0i64..1_000,
            count in 1i64..1_000,
            period in 1i64..1_000_000,
            warmup in proptest::option::of(1i64..1_000_000),
            now in 0..=Ticks::LATEST.get(),
            quantity in 0u64..2_000,
        ) {
            let gcra = Gcra::new(max_burst, count, period, Unit::Milliseconds).unwrap();
            let gcra = match warmup {
                // In milliseconds.
                Some(warmup) => gcra.with_warmup(Ticks::saturating(
                    i128::from(warmup) * 1_000_000 * Ticks::NANOSECOND.get(),
                )),
                None => gcra,
            };
            let (now, missing) = (Ticks::saturating(now), Some(gcra.missing_state()));
            prop_assert_eq!(gcra.apply(None, now, quantity), gcra.apply(missing, now, quantity));
            prop_assert_eq!(gcra.refund(None, now, quantity), gcra.refund(missing, now, quantity));
        }

        /// Any clock, any stored state (a clock stepped back, parameters changed): no panic,
        /// and every reply stays in range.
        #[test]
        fn any_clock_and_state_gives_a_sane_reply(
            max_burst in 0i64..i64::MAX,
            count in 1i64..i64::MAX,
            period in 1i64..1_000_000,
            stored in proptest::option::of(0..=Ticks::LATEST.get()),
            now in 0..=(i64::MAX as i128 * Ticks::NANOSECOND.get()),
            quantity in any::<u64>(),
        ) {
            if let Ok(gcra) = Gcra::new(max_burst, count, period, Unit::Milliseconds) {
                let outcome = gcra.apply(stored.map(|tat| warm(Ticks::saturating(tat))), Ticks::saturating(now), quantity);
                let reply = outcome.verdict.to_reply(Unit::Microseconds, Rounding::Up);
                prop_assert!(reply[2] >= 0 && reply[2] <= reply[1]);
                prop_assert!(reply[3] >= -1 && reply[4] >= 0);
                if let Some(tat) = outcome.new_state.map(|state| state.tat) {
                    prop_assert!(tat <= Ticks::saturating(now) + gcra.tolerance);
                    prop_assert!(tat <= Ticks::LATEST);
                }
            }
        }
    }
}
