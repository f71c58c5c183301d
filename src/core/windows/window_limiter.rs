//! What every window counter shares: its parameters, validated ([`WindowLimiter`]), which
//! bucket an instant falls in, the common layout of its states (one header, then the
//! counts; their tags are `core/codec.rs`'s), and what a call answers. The algorithms' own
//! files decide; this one is what they read.

use crate::core::codec::Placement;
use crate::core::params::{self, ParamError, MAX_BUCKETS};
use crate::core::time::{Micros, Millis, Unit};
use crate::core::verdict::Verdict;

pub(super) use crate::core::codec::{
    ANCHORED_TAG, BUCKETS_LIMITED_TAG, BUCKETS_TAG, BUCKETS_V1_TAG, FIXED_TAG, SLIDING_TAG,
};

/// Whether `tag` starts a window counter's state, of any algorithm.
pub(super) fn is_window_tag(tag: u8) -> bool {
    crate::core::codec::WINDOW_TAGS.contains(&tag)
}

/// Bytes before the counters: the tag, then 7 bytes holding the newest bucket's start (54
/// bits of microseconds, enough for the year 2541) and the counters' width (2 bits).
pub(super) const HEADER_LEN: usize = 8;
/// Bits of the newest bucket's start in the header.
pub(super) const START_BITS: u32 = 54;

/// The longest first-release `BUCKETS` state: `MAX_BUCKETS` counters of 8 bytes.
pub(super) const MAX_V1_LEN: usize = HEADER_LEN + 8 * MAX_BUCKETS as usize;

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
    pub(super) algorithm: Algorithm,
    pub(super) limit: u64,
    /// The window, in microseconds.
    pub(super) window: i64,
    /// Buckets per window.
    pub(super) per_window: i64,
    /// Buckets kept: the ones that can still count.
    pub(super) slots: usize,
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
    pub(super) fn buckets_per_window(&self) -> i64 {
        self.per_window
    }

    /// The window, in microseconds.
    pub(super) fn window_micros(&self) -> i64 {
        self.window
    }

    /// The bucket holding instant `micros` (not negative).
    #[inline(always)]
    pub(super) fn bucket_of(&self, micros: i64) -> i64 {
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
    pub(super) fn bucket_start(&self, bucket: i64) -> i64 {
        if self.per_window == 1 {
            return bucket.saturating_mul(self.window);
        }
        let (windows, index) = (bucket / self.per_window, bucket % self.per_window);
        // `index * window` < `per_window * window`, which the parameters keep within i64.
        windows
            .saturating_mul(self.window)
            .saturating_add((index * self.window + self.per_window - 1) / self.per_window)
    }

    pub(super) fn tag(&self) -> u8 {
        match self.algorithm {
            Algorithm::Fixed => FIXED_TAG,
            Algorithm::Sliding => SLIDING_TAG,
            Algorithm::Buckets(_) => BUCKETS_V1_TAG,
            Algorithm::Anchored => ANCHORED_TAG,
        }
    }

    /// Reads a stored state into `counts` (oldest first, exactly `slots` of them) and
    /// returns the start of its newest bucket.
    ///
    /// A state kept with another `BUCKETS n` keeps its newest counts; older ones that no
    /// longer have a bucket of their own are added to the oldest kept bucket, so nothing
    /// counted is forgotten before its time.
    pub(super) fn decode(&self, value: &[u8], counts: &mut Vec<u64>) -> Result<i64, StateError> {
        counts.clear();
        counts.resize(self.slots, 0);
        self.decode_into(value, counts)
    }

    /// [`WindowLimiter::decode`] into `counts`, which holds `slots` zeros.
    pub(super) fn decode_into(&self, value: &[u8], counts: &mut [u64]) -> Result<i64, StateError> {
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
    pub(super) fn encode(&self, counts: &[u64], newest_start: i64, value: &mut Vec<u8>) {
        let width_code = width_code(counts.iter().copied().fold(self.limit, u64::max));
        let width = 1usize << width_code;
        push_header(value, self.tag(), newest_start as u64, width_code);
        for &count in counts {
            value.extend_from_slice(&count.to_le_bytes()[..width]);
        }
    }
}

/// Appends a window counter's header to `value`: `tag`, then in 7 bytes `start` (the newest
/// bucket's, 54 bits of microseconds) and the counters' width code (2 bits).
#[inline(always)]
pub(super) fn push_header(value: &mut Vec<u8>, tag: u8, start: u64, width_code: u64) {
    value.push(tag);
    let header = start | width_code << START_BITS;
    value.extend_from_slice(&header.to_le_bytes()[..HEADER_LEN - 1]);
}

/// A stored state of `tag` that holds `slots` counters, split: its newest bucket's start,
/// the counters' width in bytes, and the counters. A state of 5fec6b4's layout keeps the
/// limit its counts were counted under before them: read, and passed over (what was used is
/// counted in requests). Another window counter's tag is `OtherAlgorithm`.
#[inline(always)]
pub(super) fn split_state(
    value: &[u8],
    tag: u8,
    slots: usize,
) -> Result<(i64, usize, &[u8]), StateError> {
    let (&stored, rest) = value.split_first().ok_or(StateError::Foreign)?;
    if stored != tag {
        return Err(if is_window_tag(stored) {
            StateError::OtherAlgorithm
        } else {
            StateError::Foreign
        });
    }
    let (header, body) = rest
        .split_at_checked(HEADER_LEN - 1)
        .ok_or(StateError::Foreign)?;
    let header = read_le(header);
    let width = 1usize << (header >> START_BITS);
    let counts = if body.len() == width * (slots + 1) {
        &body[width..]
    } else if body.len() == width * slots {
        body
    } else {
        return Err(StateError::Foreign);
    };
    Ok(((header & ((1 << START_BITS) - 1)) as i64, width, counts))
}

/// The code (0 to 3) of the fewest of 1, 2, 4 or 8 bytes that hold `largest`: the counters'
/// width, kept in a state's header.
pub(super) fn width_code(largest: u64) -> u64 {
    match largest {
        0..=0xFF => 0,
        0x100..=0xFFFF => 1,
        0x1_0000..=0xFFFF_FFFF => 2,
        _ => 3,
    }
}

/// An unsigned little-endian integer of up to 8 bytes.
pub(super) fn read_le(bytes: &[u8]) -> u64 {
    let mut word = [0; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

/// The first whole millisecond at or after `micros` µs since the epoch.
pub(super) fn ceil_millis(micros: i64) -> Millis {
    Micros::saturating(micros).ceil_millis()
}
