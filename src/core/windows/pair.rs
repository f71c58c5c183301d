//! `FIXED` and `SLIDING`: the newest window's count, and for `SLIDING` the previous one's,
//! kept in two integers rather than a row of buckets (`BUCKETS n` has its own log,
//! [`super::buckets`]). A bucket is a window here, found with one division.

use super::window_limiter::{
    ceil_millis, push_header, read_le, split_state, width_code, Algorithm, StateError,
    WindowCounts, WindowLimiter, WindowOutcome, WindowRefund,
};
use crate::core::codec::Placement;
use crate::core::time::{Micros, Ticks};
use crate::core::verdict::{RetryAfter, Verdict};

/// The counts a `FIXED` or `SLIDING` limiter keeps, rolled on to its newest window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Pair {
    /// The previous window's count: `SLIDING` only, always 0 for `FIXED`.
    previous: u64,
    /// The newest window's count.
    current: u64,
    /// The newest window, numbered from the epoch.
    newest: i64,
}

impl Pair {
    /// Every counted request, saturated.
    fn used(&self) -> u64 {
        self.previous.saturating_add(self.current)
    }
}

impl WindowLimiter {
    /// [`WindowLimiter::counts`] for `FIXED` and `SLIDING`, at `now` µs since the epoch.
    pub(super) fn pair_counts(
        &self,
        stored: Option<&[u8]>,
        now: i64,
    ) -> Result<WindowCounts, StateError> {
        let pair = self.load_pair(stored, now)?;
        // The previous window weighs until the newest one ends; the newest counts until
        // it has left the sliding window too (a window more), or until it ends (FIXED).
        let newest_end = self.bucket_start(pair.newest + 1);
        let current_ends_at = self.bucket_start(pair.newest + self.slots as i64);
        Ok(WindowCounts {
            previous: pair.previous,
            previous_ends_at: Micros::saturating(if pair.previous > 0 { newest_end } else { now }),
            current: pair.current,
            current_ends_at: Micros::saturating(if pair.current > 0 {
                current_ends_at
            } else {
                now
            }),
        })
    }

    /// [`WindowLimiter::apply`] for `FIXED` and `SLIDING`, at `now` µs since the epoch.
    #[inline(always)]
    pub(super) fn apply_pair(
        &self,
        stored: Option<&[u8]>,
        now: i64,
        quantity: u64,
        value: &mut Vec<u8>,
    ) -> Result<WindowOutcome, StateError> {
        let mut pair = self.load_pair(stored, now)?;
        let used = pair.used();
        let room = self.room(&pair, now);
        // The products stay far inside i128 (see `room`).
        let weight = self.quantity_weight();
        let fits = quantity <= self.limit;
        let admitted = fits && room - weight.wrapping_mul(quantity as i128) >= 0;
        let charged = if admitted { quantity } else { 0 };
        pair.current += charged;
        let verdict = Verdict {
            limited: !admitted,
            limit: self.limit as i64,
            remaining: self.whole_units(room - weight.wrapping_mul(charged as i128)),
            retry_after: if !admitted && fits {
                RetryAfter::of(
                    Micros::saturating((self.retry_at(&pair, used, quantity) - now).max(0)).ticks(),
                )
            } else {
                RetryAfter::NONE
            },
            reset_after: self.reset_after(&pair, now),
        };
        if charged == 0 {
            return Ok(WindowOutcome {
                verdict,
                expire_at: None,
                placement: Placement::WHOLE,
            });
        }
        self.encode_pair(&pair, value);
        let expire_at = self.bucket_start(pair.newest + self.slots as i64);
        Ok(WindowOutcome {
            verdict,
            expire_at: Some(ceil_millis(expire_at)),
            placement: Placement::WHOLE,
        })
    }

    /// [`WindowLimiter::refund`] for `FIXED` and `SLIDING`, at `now` µs since the epoch: the
    /// newest count gives back first.
    pub(super) fn refund_pair(
        &self,
        stored: Option<&[u8]>,
        now: i64,
        quantity: u64,
        value: &mut Vec<u8>,
    ) -> Result<WindowRefund, StateError> {
        let mut pair = self.load_pair(stored, now)?;
        let from_current = quantity.min(pair.current);
        let from_previous = (quantity - from_current).min(pair.previous);
        pair.current -= from_current;
        pair.previous -= from_previous;
        let returned = from_current + from_previous;
        let room = self.room(&pair, now);
        let verdict = Verdict {
            limited: room < 0,
            limit: self.limit as i64,
            remaining: self.whole_units(room),
            retry_after: RetryAfter::NONE,
            reset_after: self.reset_after(&pair, now),
        };
        if returned > 0 {
            self.encode_pair(&pair, value);
        }
        // A state scheduled ahead of `now` (`DELAY`, `FORCE`) stands for the windows before
        // its own, which it no longer holds: it stays until its window begins, even empty.
        let queue_end = Some(self.bucket_start(pair.newest)).filter(|&start| start > now);
        Ok(WindowRefund {
            verdict,
            changed: returned > 0,
            expire_at: self.reset_at(&pair).max(queue_end).map(ceil_millis),
            placement: Placement::WHOLE,
        })
    }

    /// The stored counts (or none), as counted whatever limit counted them, rolled on to
    /// `now`'s window. A clock that went back keeps counting in the newest window it knows.
    #[inline(always)]
    fn load_pair(&self, stored: Option<&[u8]>, now: i64) -> Result<Pair, StateError> {
        let newest = self.bucket_of(now);
        let Some(stored) = stored else {
            return Ok(Pair {
                newest,
                ..Pair::default()
            });
        };
        let (start, previous, current) = self.decode_pair(stored)?;
        let stored_newest = self.bucket_of(start);
        Ok(match newest - stored_newest {
            ..=0 => Pair {
                previous,
                current,
                newest: stored_newest,
            },
            // The newest count becomes the previous one, which FIXED does not keep.
            1 if self.algorithm == Algorithm::Sliding => Pair {
                previous: current,
                current: 0,
                newest,
            },
            _ => Pair {
                newest,
                ..Pair::default()
            },
        })
    }

    /// Reads a stored state: the newest window's start, and the previous and newest counts.
    /// A state of 5fec6b4's layout keeps the limit its counts were counted under before
    /// them: read, and passed over (what was used is counted in requests).
    #[inline(always)]
    fn decode_pair(&self, value: &[u8]) -> Result<(i64, u64, u64), StateError> {
        let (start, width, counts) = split_state(value, self.tag(), self.slots)?;
        let (previous, current) = counts.split_at(counts.len() - width);
        Ok((start, read_le(previous), read_le(current)))
    }

    /// Appends the state: the tag, the newest window's start and the counters' width, then
    /// the counts (the previous one first, for `SLIDING`), each in the fewest of 1, 2, 4 or
    /// 8 bytes that holds both the limit and every count.
    #[inline(always)]
    fn encode_pair(&self, pair: &Pair, value: &mut Vec<u8>) {
        let width_code = width_code(self.limit.max(pair.previous).max(pair.current));
        let width = 1usize << width_code;
        let start = self.bucket_start(pair.newest) as u64;
        push_header(value, self.tag(), start, width_code);
        if self.algorithm == Algorithm::Sliding {
            value.extend_from_slice(&pair.previous.to_le_bytes()[..width]);
        }
        value.extend_from_slice(&pair.current.to_le_bytes()[..width]);
    }

    /// How much room is left: not negative while nothing more is counted than fits. In
    /// units of quantity for `FIXED`, of quantity-microseconds for `SLIDING`, where the
    /// previous count weighs what of its window still overlaps the sliding one (a quantity
    /// takes [`WindowLimiter::quantity_weight`] of it).
    #[inline(always)]
    fn room(&self, pair: &Pair, now: i64) -> i128 {
        if self.algorithm != Algorithm::Sliding {
            return self.limit as i128 - pair.current as i128;
        }
        // Counts below 2^64 times a window below 2^53 µs: each product is below 2^117, and
        // so is the room, either way.
        let window = i128::from(self.window);
        let overlap = i128::from(self.window - self.elapsed(pair.newest, now));
        (self.limit as i128 * window)
            .wrapping_sub(i128::from(pair.previous).wrapping_mul(overlap))
            .wrapping_sub(i128::from(pair.current).wrapping_mul(window))
    }

    /// How much of [`WindowLimiter::room`] one unit of quantity takes.
    fn quantity_weight(&self) -> i128 {
        match self.algorithm {
            Algorithm::Sliding => i128::from(self.window),
            Algorithm::Fixed | Algorithm::Buckets(_) | Algorithm::Anchored => 1,
        }
    }

    /// Whole units of quantity that fit in `room` (none when it is negative).
    #[inline(always)]
    fn whole_units(&self, room: i128) -> i64 {
        if room <= 0 {
            return 0;
        }
        let units = match self.quantity_weight() {
            1 => room,
            // Usually within 64 bits: a division instruction, not a 128-bit routine.
            weight if room >> 64 == 0 => i128::from(room as u64 / weight as u64),
            weight => room / weight,
        };
        // At most `limit`, below 2^63.
        units as i64
    }

    /// Microseconds since the start of the newest window, within `0..window`; 0 when the
    /// clock is behind it.
    #[inline(always)]
    fn elapsed(&self, newest: i64, now: i64) -> i64 {
        (now - self.bucket_start(newest)).clamp(0, self.window - 1)
    }

    /// The instant `quantity` (at most `limit`, refused at `now`) will fit, absent other
    /// traffic, given the counts (`used` of them in all).
    fn retry_at(&self, pair: &Pair, used: u64, quantity: u64) -> i64 {
        if self.algorithm != Algorithm::Sliding {
            // Everything counted leaves with the window; the excess is never more.
            debug_assert!(used.saturating_add(quantity) - self.limit <= pair.current);
            return self.bucket_start(pair.newest + 1);
        }
        // Within the current window, the previous count's weight falls linearly: fits once
        // previous * (window - elapsed) <= (limit - current - q) * window.
        let window = i128::from(self.window);
        let (previous, current) = (i128::from(pair.previous), i128::from(pair.current));
        let quantity = quantity as i128;
        let spare = (self.limit as i128 - current - quantity) * window;
        if spare >= 0 && previous > 0 {
            let overlap = (spare / previous).min(window);
            return self.bucket_start(pair.newest) + (window - overlap) as i64;
        }
        // Otherwise in the next window, where the current count becomes the previous.
        let spare = (self.limit as i128 - quantity) * window;
        let overlap = if current > 0 {
            (spare / current).min(window)
        } else {
            window
        };
        self.bucket_start(pair.newest + 1) + (window - overlap) as i64
    }

    /// How long until every counted request has left the window.
    #[inline(always)]
    fn reset_after(&self, pair: &Pair, now: i64) -> Ticks {
        Micros::saturating(self.reset_at(pair).map_or(0, |at| at - now).max(0)).ticks()
    }

    /// When every counted request has left the window, or `None` when none is counted: the
    /// newest count leaves `slots` windows after its own starts.
    #[inline(always)]
    fn reset_at(&self, pair: &Pair) -> Option<i64> {
        let slots = self.slots as i64;
        if pair.current > 0 {
            Some(self.bucket_start(pair.newest + slots))
        } else if pair.previous > 0 {
            Some(self.bucket_start(pair.newest - 1 + slots))
        } else {
            None
        }
    }
}
