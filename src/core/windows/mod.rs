//! Window counters: a fixed window, the sliding-window counter, and a rolling window of `n`
//! buckets, as one limiter over a short row of counters.
//!
//! Time is cut into buckets: `n` equal buckets per window for `BUCKETS n`, one bucket per
//! window otherwise. Bucket `k` starts at `k * window / n` microseconds since the Unix epoch
//! (rounded up to a whole microsecond), so windows are aligned to multiples of `window`.
//! The limiter keeps the counts of its last few buckets, newest last:
//!
//! - `FIXED` keeps one: the current window's count; admits when `count + q <= limit`.
//! - `SLIDING` keeps two, the previous and the current window, and admits when
//!   `previous * (1 - elapsed / window) + current + q <= limit`, compared exactly in integers.
//! - `BUCKETS n` keeps the buckets that counted among the last `n`, with their sum: admits
//!   when that sum plus `q` is at most `limit`; buckets roll off one at a time. Its state is
//!   a log of its own ([`super::buckets`]), O(1) amortised per call whatever `n`.
//! - `ANCHORED` is a fixed window that starts at the key's first request instead of on the
//!   clock ([`anchored`]).
//!
//! Only admitted requests are counted. All times are whole microseconds, the server clock's
//! resolution.

use self::buckets::Entry;
use super::time::Micros;

mod anchored;
mod buckets;
mod pair;
mod window_limiter;

use self::window_limiter::{read_le, HEADER_LEN, MAX_V1_LEN, START_BITS};
pub use self::window_limiter::{
    Algorithm, StateError, WindowCounts, WindowLimiter, WindowOutcome, WindowRefund,
};

/// Working memory reused from call to call, so that a call allocates nothing once warm:
/// the entries of a `BUCKETS` log (`FIXED` and `SLIDING` keep their counts on the stack).
#[derive(Default)]
pub struct Scratch {
    entries: Vec<Entry>,
}

impl Scratch {
    /// Empty working memory; it grows as calls need.
    pub const fn new() -> Scratch {
        Scratch {
            entries: Vec::new(),
        }
    }
}

impl WindowLimiter {
    /// Decides a request of `quantity` at `now`, given the stored value (`None` for a new or
    /// expired key). When the request changes the state, the new value is appended to
    /// `value` and the outcome says when the key should expire. A `quantity` of 0 is a peek
    /// and never writes.
    ///
    /// With `patch`, a `BUCKETS` state may be written as the bytes that change at the end of
    /// the stored value (the outcome's placement says from where); otherwise it is whole.
    #[inline(always)]
    pub fn apply(
        &self,
        stored: Option<&[u8]>,
        now: Micros,
        quantity: u64,
        patch: bool,
        scratch: &mut Scratch,
        value: &mut Vec<u8>,
    ) -> Result<WindowOutcome, StateError> {
        // The cores count in whole microseconds since the epoch, never before it.
        let now = now.not_before_epoch().get();
        match self.algorithm {
            Algorithm::Buckets(_) => {
                self.apply_buckets(stored, now, quantity, patch, &mut scratch.entries, value)
            }
            Algorithm::Fixed | Algorithm::Sliding => self.apply_pair(stored, now, quantity, value),
            Algorithm::Anchored => self.apply_anchored(stored, now, quantity, value),
        }
    }

    /// The counts of a `FIXED`, `SLIDING` or `ANCHORED` state at `now`, as counted, whatever
    /// limit they were counted under (`None` for a missing key: none); `None` for `BUCKETS`,
    /// whose counts are not two windows'.
    pub fn counts(
        &self,
        stored: Option<&[u8]>,
        now: Micros,
    ) -> Option<Result<WindowCounts, StateError>> {
        match self.algorithm {
            Algorithm::Buckets(_) => None,
            Algorithm::Fixed | Algorithm::Sliding => {
                Some(self.pair_counts(stored, now.not_before_epoch().get()))
            }
            Algorithm::Anchored => Some(self.anchored_counts(stored, now.not_before_epoch().get())),
        }
    }

    /// Gives back `quantity` at `now`: subtracted from the newest counted buckets first,
    /// never below zero. When anything was given back, the new state is appended to `value`
    /// and the outcome says when the key should expire: when the newest bucket still counted
    /// leaves the window (`None` when nothing counts any more). The verdict is the standing
    /// after, as a peek sees it. `patch` as for [`WindowLimiter::apply`].
    pub fn refund(
        &self,
        stored: Option<&[u8]>,
        now: Micros,
        quantity: u64,
        patch: bool,
        scratch: &mut Scratch,
        value: &mut Vec<u8>,
    ) -> Result<WindowRefund, StateError> {
        let now = now.not_before_epoch().get();
        match self.algorithm {
            Algorithm::Buckets(_) => {
                self.refund_buckets(stored, now, quantity, patch, &mut scratch.entries, value)
            }
            Algorithm::Fixed | Algorithm::Sliding => self.refund_pair(stored, now, quantity, value),
            Algorithm::Anchored => self.refund_anchored(stored, now, quantity, value),
        }
    }

    /// When every request the stored `value` counts may go ahead: the start of its newest
    /// counted bucket, or, for `FIXED` and `SLIDING`, the instant a request was scheduled
    /// for (`DELAY`, `FORCE`). A request after them goes no earlier: first come, first
    /// served. `Micros::ZERO` for a value this limiter does not read as its own.
    pub fn queue_end(&self, value: &[u8]) -> Micros {
        let end = match self.algorithm {
            Algorithm::Fixed | Algorithm::Sliding | Algorithm::Anchored => {
                match value.split_first() {
                    Some((&tag, rest)) if tag == self.tag() && rest.len() >= HEADER_LEN - 1 => {
                        (read_le(&rest[..HEADER_LEN - 1]) & ((1 << START_BITS) - 1)) as i64
                    }
                    _ => 0,
                }
            }
            Algorithm::Buckets(_) => self.buckets_queue_end(value),
        };
        Micros::saturating(end)
    }
}

/// Whether a string of `len` bytes may hold a window counter's state.
pub fn is_window_length(len: usize) -> bool {
    (HEADER_LEN + 1..=MAX_V1_LEN.max(buckets::MAX_LEN)).contains(&len)
}

#[cfg(test)]
mod tests;
