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
use super::codec::Placement;
use super::params::{self, ParamError, MAX_BUCKETS};
use super::time::{Micros, Millis, Unit};
use super::verdict::Verdict;

mod anchored;
mod buckets;
mod pair;

/// Tag of a `FIXED` state.
const FIXED_TAG: u8 = 0xF9;
/// Tag of a `SLIDING` state.
const SLIDING_TAG: u8 = 0xFA;
/// Tag of a `BUCKETS` state as the first release wrote it (all `n` counts), still read.
const BUCKETS_V1_TAG: u8 = 0xFB;

/// Whether `tag` starts a window counter's state, of any algorithm.
fn is_window_tag(tag: u8) -> bool {
    [
        FIXED_TAG,
        SLIDING_TAG,
        BUCKETS_V1_TAG,
        buckets::TAG,
        buckets::LIMITED_TAG,
        anchored::TAG,
    ]
    .contains(&tag)
}

/// Bytes before the counters: the tag, then 7 bytes holding the newest bucket's start (54
/// bits of microseconds, enough for the year 2541) and the counters' width (2 bits).
const HEADER_LEN: usize = 8;
/// Bits of the newest bucket's start in the header.
const START_BITS: u32 = 54;

/// The longest first-release `BUCKETS` state: `MAX_BUCKETS` counters of 8 bytes.
const MAX_V1_LEN: usize = HEADER_LEN + 8 * MAX_BUCKETS as usize;

/// Which window counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// One count per window, windows aligned to the epoch.
    Fixed,
    /// The previous window's count, weighted by how much of it still overlaps, plus the
    /// current one.
    Sliding,
    /// The window cut into this many buckets.
    Buckets(u16),
    /// One count per window, each window starting at the first request after the last.
    Anchored,
}

/// Why a stored value cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateError {
    /// Not a window counter's state at all.
    Foreign,
    /// The state of another window algorithm.
    OtherAlgorithm,
}

/// What a `FIXED` or `SLIDING` window counts at an instant (`RL.WINDOW.COUNTS`), and until
/// when; an instant is the instant asked when there is nothing to count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowCounts {
    /// The previous window's count (`SLIDING`; 0 for `FIXED`).
    pub previous: u64,
    /// When it stops weighing: the end of the current window.
    pub previous_ends_at: Micros,
    /// The current window's count.
    pub current: u64,
    /// When it stops counting: the end of the window after (`SLIDING`) or of its own
    /// (`FIXED`).
    pub current_ends_at: Micros,
}

/// A window limiter's parameters, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowLimiter {
    algorithm: Algorithm,
    limit: u64,
    /// The window, in microseconds.
    window: i64,
    /// Buckets per window.
    per_window: i64,
    /// Buckets kept: the ones that can still count.
    slots: usize,
}

/// What a refund did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowRefund {
    /// The standing after, as a peek sees it.
    pub verdict: Verdict,
    /// Whether anything was given back: the new state was then appended to the output
    /// buffer.
    pub changed: bool,
    /// When the key should expire: when the newest counted bucket leaves the window;
    /// `None` when nothing counts any more.
    pub expire_at: Option<Millis>,
    /// Where the new state's bytes go.
    pub placement: Placement,
}

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

/// The decision for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowOutcome {
    /// The reply, before rounding.
    pub verdict: Verdict,
    /// When the request changed the state: the new state was written to the output buffer,
    /// and the key should expire then. `None` for a refused request or a peek, which change
    /// nothing.
    pub expire_at: Option<Millis>,
    /// Where the new state's bytes go.
    pub placement: Placement,
}

impl WindowLimiter {
    /// Validates the parameters: at most `limit` per `window` `unit`s, counted by
    /// `algorithm`.
    pub fn new(
        limit: i64,
        window: i64,
        unit: Unit,
        algorithm: Algorithm,
    ) -> Result<WindowLimiter, ParamError> {
        let limit = params::limit(limit)?;
        let window = params::window(window, unit)?.get();
        let (per_window, slots) = match algorithm {
            Algorithm::Fixed | Algorithm::Anchored => (1, 1),
            Algorithm::Sliding => (1, 2),
            Algorithm::Buckets(n) => {
                let n = i64::from(n);
                if !(1..=MAX_BUCKETS).contains(&n) {
                    return Err(ParamError::BucketsOutOfRange);
                }
                if window < n {
                    return Err(ParamError::BucketTooShort);
                }
                // Bucket arithmetic multiplies offsets within a window by n.
                window
                    .checked_mul(n)
                    .ok_or(ParamError::WindowTooLongForBuckets)?;
                (n, n as usize)
            }
        };
        Ok(WindowLimiter {
            algorithm,
            limit,
            window,
            per_window,
            slots,
        })
    }

    /// The largest quantity ever admitted.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Buckets per window: `n` for `BUCKETS n`, else 1.
    fn buckets_per_window(&self) -> i64 {
        self.per_window
    }

    /// The window, in microseconds.
    fn window_micros(&self) -> i64 {
        self.window
    }

    /// The bucket holding instant `micros` (not negative).
    #[inline(always)]
    fn bucket_of(&self, micros: i64) -> i64 {
        if self.per_window == 1 {
            // `FIXED` and `SLIDING`: a bucket is a window, and one division does.
            return micros / self.window;
        }
        let (windows, offset) = (micros / self.window, micros % self.window);
        // Both products stay within i64: windows * n <= micros, offset * n < window * n.
        windows * self.per_window + offset * self.per_window / self.window
    }

    /// The first microsecond of bucket `bucket`, saturating: a bucket number read from a
    /// key may be any 54-bit value, whose start lies beyond any clock.
    #[inline(always)]
    fn bucket_start(&self, bucket: i64) -> i64 {
        if self.per_window == 1 {
            return bucket.saturating_mul(self.window);
        }
        let (windows, index) = (bucket / self.per_window, bucket % self.per_window);
        // `index * window` < `per_window * window`, which the parameters keep within i64.
        windows
            .saturating_mul(self.window)
            .saturating_add((index * self.window + self.per_window - 1) / self.per_window)
    }

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

    fn tag(&self) -> u8 {
        match self.algorithm {
            Algorithm::Fixed => FIXED_TAG,
            Algorithm::Sliding => SLIDING_TAG,
            Algorithm::Buckets(_) => BUCKETS_V1_TAG,
            Algorithm::Anchored => anchored::TAG,
        }
    }

    /// Reads a stored state into `counts` (oldest first, exactly `slots` of them) and
    /// returns the start of its newest bucket.
    ///
    /// A state kept with another `BUCKETS n` keeps its newest counts; older ones that no
    /// longer have a bucket of their own are added to the oldest kept bucket, so nothing
    /// counted is forgotten before its time.
    fn decode(&self, value: &[u8], counts: &mut Vec<u64>) -> Result<i64, StateError> {
        counts.clear();
        counts.resize(self.slots, 0);
        self.decode_into(value, counts)
    }

    /// [`WindowLimiter::decode`] into `counts`, which holds `slots` zeros.
    fn decode_into(&self, value: &[u8], counts: &mut [u64]) -> Result<i64, StateError> {
        debug_assert_eq!(counts.len(), self.slots);
        let (&tag, rest) = value.split_first().ok_or(StateError::Foreign)?;
        if !is_window_tag(tag) {
            return Err(StateError::Foreign);
        }
        if tag != self.tag() {
            return Err(StateError::OtherAlgorithm);
        }
        if rest.len() < HEADER_LEN {
            return Err(StateError::Foreign);
        }
        let header = read_le(&rest[..HEADER_LEN - 1]);
        let start = (header & ((1 << START_BITS) - 1)) as i64;
        let width = 1usize << (header >> START_BITS);
        let body = &rest[HEADER_LEN - 1..];
        let stored_slots = body.len() >> (header >> START_BITS);
        let expected = match self.algorithm {
            Algorithm::Fixed | Algorithm::Anchored => stored_slots == 1,
            Algorithm::Sliding => stored_slots == 2,
            Algorithm::Buckets(_) => (1..=MAX_BUCKETS as usize).contains(&stored_slots),
        };
        if body.len() & (width - 1) != 0 || !expected {
            return Err(StateError::Foreign);
        }
        if stored_slots == self.slots {
            // FIXED, SLIDING, and BUCKETS kept with the same n: one count per slot.
            for (count, chunk) in counts.iter_mut().zip(body.chunks_exact(width)) {
                *count = read_le(chunk);
            }
            return Ok(start);
        }
        let kept = stored_slots.min(self.slots);
        let dropped = stored_slots - kept;
        for (slot, chunk) in body.chunks_exact(width).enumerate() {
            let target = (slot.saturating_sub(dropped) + self.slots - kept).min(self.slots - 1);
            counts[target] = counts[target].saturating_add(read_le(chunk));
        }
        Ok(start)
    }

    /// Appends the state to `value`: the tag, the newest bucket's start and the counters'
    /// width, then the counts, oldest first, each in the fewest of 1, 2, 4 or 8 bytes that
    /// holds both the limit and every count. The layout `FIXED` and `SLIDING` write, and
    /// the one the first release wrote for `BUCKETS n`: what tests store to read back.
    #[cfg(test)]
    fn encode(&self, counts: &[u64], newest_start: i64, value: &mut Vec<u8>) {
        let width_code = width_code(counts.iter().copied().fold(self.limit, u64::max));
        let width = 1usize << width_code;
        value.push(self.tag());
        let header = (newest_start as u64) | (width_code << START_BITS);
        value.extend_from_slice(&header.to_le_bytes()[..HEADER_LEN - 1]);
        for &count in counts {
            value.extend_from_slice(&count.to_le_bytes()[..width]);
        }
    }
}

/// The code (0 to 3) of the fewest of 1, 2, 4 or 8 bytes that hold `largest`: the counters'
/// width, kept in a state's header.
fn width_code(largest: u64) -> u64 {
    match largest {
        0..=0xFF => 0,
        0x100..=0xFFFF => 1,
        0x1_0000..=0xFFFF_FFFF => 2,
        _ => 3,
    }
}

/// Whether a string of `len` bytes may hold a window counter's state.
pub fn is_window_length(len: usize) -> bool {
    (HEADER_LEN + 1..=MAX_V1_LEN.max(buckets::MAX_LEN)).contains(&len)
}

/// An unsigned little-endian integer of up to 8 bytes.
fn read_le(bytes: &[u8]) -> u64 {
    let mut word = [0; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

/// The first whole millisecond at or after `micros` µs since the epoch.
fn ceil_millis(micros: i64) -> Millis {
    Micros::saturating(micros).ceil_millis()
}

#[cfg(test)]
mod tests;
