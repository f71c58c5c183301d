//! `ANCHORED`: a fixed window that starts at the key's first request rather than on the
//! clock, as `INCR` with `EXPIRE` on the first hit counts (express-rate-limit's stores,
//! @nestjs/throttler's, `limits`' Redis storage, lua-resty-limit-traffic's `count`). The
//! state is one count and the instant its window started; the first request after the
//! window ends starts the next one.
//!
//! Layout, `FIXED`'s with its own tag: the tag, 7 bytes holding the window's start in
//! microseconds (54 bits) and the counter's width (2 bits), then the limit and the count,
//! each in the fewest of 1, 2, 4 or 8 bytes that holds both. The first releases kept no
//! limit (the count alone), still read.

use super::window_limiter::{
    ceil_millis, push_header, read_le, split_state, width_code, StateError, WindowCounts,
    WindowLimiter, WindowOutcome, WindowRefund, ANCHORED_TAG as TAG,
};
use crate::core::codec::Placement;
use crate::core::time::{Micros, Ticks};
use crate::core::verdict::{RetryAfter, Verdict};

/// The count of the window a key is in, and when that window started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Anchored {
    start: i64,
    count: u64,
}

impl WindowLimiter {
    /// The window `now` falls in, given the stored state: the stored one while it lasts (a
    /// clock behind its start keeps counting in it), else a new one starting at `now`. Its
    /// count is as counted, whatever limit counted it.
    fn load_anchored(&self, stored: Option<&[u8]>, now: i64) -> Result<Anchored, StateError> {
        Ok(self.stored_window(stored, now)?.unwrap_or(Anchored {
            start: now,
            count: 0,
        }))
    }

    /// The stored window, while `now` is within it (see [`WindowLimiter::load_anchored`]).
    fn stored_window(
        &self,
        stored: Option<&[u8]>,
        now: i64,
    ) -> Result<Option<Anchored>, StateError> {
        let Some(stored) = stored else {
            return Ok(None);
        };
        let stored = decode(stored)?;
        Ok((now < stored.start.saturating_add(self.window)).then_some(stored))
    }

    /// When the window of `state` ends.
    fn anchored_end(&self, state: &Anchored) -> i64 {
        state.start.saturating_add(self.window)
    }

    /// The reply for `state` at `now`: `limited` as given, the room left, and how long until
    /// the window ends (the reset, and the wait of a refusal that will fit then).
    fn anchored_verdict(&self, state: &Anchored, now: i64, limited: bool, fits: bool) -> Verdict {
        let left = Micros::saturating((self.anchored_end(state) - now).max(0)).ticks();
        Verdict {
            limited,
            limit: self.limit as i64,
            remaining: self.limit.saturating_sub(state.count) as i64,
            retry_after: if limited && fits {
                RetryAfter::of(left)
            } else {
                RetryAfter::NONE
            },
            reset_after: if state.count > 0 { left } else { Ticks::ZERO },
        }
    }

    /// [`WindowLimiter::apply`] for `ANCHORED`, at `now` µs since the epoch.
    pub(super) fn apply_anchored(
        &self,
        stored: Option<&[u8]>,
        now: i64,
        quantity: u64,
        value: &mut Vec<u8>,
    ) -> Result<WindowOutcome, StateError> {
        let mut state = self.load_anchored(stored, now)?;
        let fits = quantity <= self.limit;
        // The stored count is read from the key's bytes: checked, whatever it holds.
        let admitted = fits
            && state
                .count
                .checked_add(quantity)
                .is_some_and(|total| total <= self.limit);
        if admitted {
            state.count += quantity;
        }
        let verdict = self.anchored_verdict(&state, now, !admitted, fits);
        if !admitted || quantity == 0 {
            return Ok(WindowOutcome {
                verdict,
                expire_at: None,
                placement: Placement::WHOLE,
            });
        }
        self.encode_anchored(&state, value);
        Ok(WindowOutcome {
            verdict,
            expire_at: Some(ceil_millis(self.anchored_end(&state))),
            placement: Placement::WHOLE,
        })
    }

    /// [`WindowLimiter::refund`] for `ANCHORED`, at `now` µs since the epoch.
    pub(super) fn refund_anchored(
        &self,
        stored: Option<&[u8]>,
        now: i64,
        quantity: u64,
        value: &mut Vec<u8>,
    ) -> Result<WindowRefund, StateError> {
        let mut state = self.load_anchored(stored, now)?;
        let returned = quantity.min(state.count);
        state.count -= returned;
        if returned > 0 {
            self.encode_anchored(&state, value);
        }
        // The window stays anchored until it ends, even emptied: the next request counts in
        // it, as `DECR` leaves an `INCR` counter at 0 with its TTL (express-rate-limit's
        // stores answer a key decremented to zero with its reset time).
        Ok(WindowRefund {
            verdict: self.anchored_verdict(&state, now, false, true),
            changed: returned > 0,
            expire_at: Some(ceil_millis(self.anchored_end(&state))),
            placement: Placement::WHOLE,
        })
    }

    /// [`WindowLimiter::counts`] for `ANCHORED`: its count, until its window ends.
    pub(super) fn anchored_counts(
        &self,
        stored: Option<&[u8]>,
        now: i64,
    ) -> Result<WindowCounts, StateError> {
        let state = self.stored_window(stored, now)?;
        Ok(WindowCounts {
            previous: 0,
            previous_ends_at: Micros::saturating(now),
            current: state.map_or(0, |state| state.count),
            // An emptied window still runs to its end (a missing one: none).
            current_ends_at: Micros::saturating(
                state.map_or(now, |state| self.anchored_end(&state)),
            ),
        })
    }

    fn encode_anchored(&self, state: &Anchored, value: &mut Vec<u8>) {
        let width_code = width_code(self.limit.max(state.count));
        push_header(value, TAG, state.start.max(0) as u64, width_code);
        value.extend_from_slice(&state.count.to_le_bytes()[..1 << width_code]);
    }
}

/// Reads an `ANCHORED` state (one counter; 5fec6b4's limit before it passed over).
fn decode(value: &[u8]) -> Result<Anchored, StateError> {
    let (start, _, count) = split_state(value, TAG, 1)?;
    Ok(Anchored {
        start,
        count: read_le(count),
    })
}
