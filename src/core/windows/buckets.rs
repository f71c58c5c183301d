//! `RL.WINDOW ... BUCKETS n`: a rolling window of `n` buckets, kept as a log of the buckets
//! that counted, so that a call costs O(1) amortised whatever `n`, and so does what it
//! writes.
//!
//! Layout (tag `0xFC`), all integers little-endian:
//!
//! ```text
//! tag | entry ... | trailer
//! entry:   bucket number mod 2^16 (2 bytes), count (`width` bytes: 1, 2, 4 or 8)
//! trailer: front (2 bytes)   index of the first entry still in the window
//!          newest (2 bytes)  index of the newest entry with a count (when total > 0)
//!          n (2 bytes)       buckets per window, and the window in µs (7 bytes), which
//!                            give bucket numbers their meaning
//!          last (7 bytes)    the last entry's bucket number (54 bits), and the width's
//!                            code in the top 2 bits
//!          total (8 bytes)   the sum of the counts from `front` on
//! ```
//!
//! Bucket `k` is the one `WindowLimiter::bucket_of` numbers `k`. Entries are appended in
//! bucket order, one per bucket that admitted something; every entry from `front` on lies
//! within `n` (at most 3,600) buckets of the last one, so 16 bits of its number are enough.
//!
//! A call drops the entries that left the window (by moving `front`), then changes the last
//! entry or appends one, or (a refund) lowers the newest counts. Everything it changes lies
//! at the value's end, so the Redis layer rewrites and propagates only those bytes
//! (`SETRANGE`). Entries before `front` stay until they outnumber the live ones; the value is
//! then rewritten without them, which costs no more than the drops that preceded it.
//!
//! The log is written under tag `0xFC`. States written by the first release (tag `0xFB`: all
//! `n` counts, oldest first), by 5fec6b4 (tag `0xF6`: the trailer ends with the limit the
//! counts were counted under), and states kept with another `n` or window are read,
//! converted, and rewritten whole. Under another limit, what was counted counts as it is:
//! the counts are compared with the new limit.

use super::window_limiter::{
    ceil_millis, is_window_tag, read_le, Algorithm, StateError, WindowLimiter, WindowOutcome,
    WindowRefund, BUCKETS_LIMITED_TAG as LIMITED_TAG, BUCKETS_TAG as TAG, BUCKETS_V1_TAG,
};
use crate::core::codec::Placement;
use crate::core::params::MAX_BUCKETS;
use crate::core::time::{Micros, Millis, Ticks, Unit};
use crate::core::verdict::{RetryAfter, Verdict};

/// Bytes of an entry's bucket number.
const ID_LEN: usize = 2;
/// Bytes of the trailer of a [`LIMITED_TAG`] log (5fec6b4's).
const LIMITED_TRAILER_LEN: usize = TRAILER_LEN + 8;
/// Bytes of the trailer of a [`TAG`] log, as written.
const TRAILER_LEN: usize = 28;
/// Dropped entries kept before the value is compacted, at least.
const COMPACT_AFTER: usize = 16;
/// Bits of the last bucket's number in its 7 bytes.
const LAST_BITS: u32 = 54;

/// The shortest bucket log: the tag and the trailer (of the older layout).
#[cfg(test)]
pub const MIN_LEN: usize = 1 + TRAILER_LEN;
/// The longest: as many entries as compaction allows, of 8-byte counts.
pub const MAX_LEN: usize =
    1 + (2 * MAX_BUCKETS as usize + COMPACT_AFTER) * (ID_LEN + 8) + LIMITED_TRAILER_LEN;

/// One bucket that counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    bucket: i64,
    count: u64,
}

/// A stored bucket log, read in place.
#[derive(Clone, Copy)]
struct Stored<'a> {
    /// The entries' bytes.
    entries: &'a [u8],
    width: usize,
    len: usize,
    front: usize,
    newest: usize,
    buckets: u16,
    window: i64,
    last: i64,
    total: u64,
    /// Whether it is a [`LIMITED_TAG`] log (5fec6b4's), whose limit is passed over (counts
    /// are read as counted): it is rewritten whole, never patched.
    limited: bool,
}

impl<'a> Stored<'a> {
    /// Reads a value tagged [`TAG`] or [`LIMITED_TAG`]; `Foreign` when its shape is not a
    /// bucket log's.
    fn parse(value: &'a [u8]) -> Result<Stored<'a>, StateError> {
        let trailer_len = match value.first() {
            Some(&LIMITED_TAG) => LIMITED_TRAILER_LEN,
            Some(&TAG) => TRAILER_LEN,
            _ => return Err(StateError::Foreign),
        };
        if value.len() < 1 + trailer_len {
            return Err(StateError::Foreign);
        }
        let (entries, trailer) = value[1..].split_at(value.len() - 1 - trailer_len);
        let front = read_le(&trailer[0..2]) as usize;
        let newest = read_le(&trailer[2..4]) as usize;
        let buckets = read_le(&trailer[4..6]) as u16;
        let window = read_le(&trailer[6..13]) as i64;
        let last_word = read_le(&trailer[13..20]);
        let total = read_le(&trailer[20..28]);
        let limited = trailer_len == LIMITED_TRAILER_LEN;
        let width = 1usize << (last_word >> LAST_BITS);
        let entry_len = ID_LEN + width;
        let len = entries.len() / entry_len;
        let valid = entries.len() % entry_len == 0
            && front <= len
            && (total == 0 || (front..len).contains(&newest))
            && (1..=MAX_BUCKETS as u16).contains(&buckets)
            && window > 0;
        if !valid {
            return Err(StateError::Foreign);
        }
        Ok(Stored {
            entries,
            width,
            len,
            front,
            newest,
            buckets,
            window,
            last: (last_word & ((1 << LAST_BITS) - 1)) as i64,
            total,
            limited,
        })
    }

    fn entry(&self, index: usize) -> Entry {
        let at = index * (ID_LEN + self.width);
        let id = read_le(&self.entries[at..at + ID_LEN]) as i64;
        // The entry lies within 2^16 buckets before the last one.
        let behind = (self.last - id).rem_euclid(1 << 16);
        Entry {
            bucket: self.last - behind,
            count: read_le(&self.entries[at + ID_LEN..at + ID_LEN + self.width]),
        }
    }
}

/// The entries a call works on: the stored ones in place, or ones rebuilt in scratch.
struct Live<'a> {
    stored: Option<Stored<'a>>,
    built: &'a [Entry],
    /// The first entry in the window, once the call's drops are done.
    front: usize,
    /// One past the last entry.
    end: usize,
    /// The sum of the counts from `front` on.
    total: u64,
    /// The newest entry with a count, when `total > 0`.
    newest: usize,
}

impl Live<'_> {
    fn entry(&self, index: usize) -> Entry {
        match &self.stored {
            Some(stored) => stored.entry(index),
            None => self.built[index],
        }
    }

    /// The bucket of the newest entry with a count, if any.
    fn newest_bucket(&self) -> Option<i64> {
        (self.total > 0).then(|| self.entry(self.newest).bucket)
    }
}

/// What a call changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Adds `quantity` to bucket `bucket`: to the last entry if it is that bucket, else in a
    /// new entry.
    Add { bucket: i64, quantity: u64 },
    /// Sets entry `lowest` to `count` and zeroes the entries after it up to `upto`.
    Lower {
        lowest: usize,
        count: u64,
        upto: usize,
    },
}

/// The call's entries with its change applied.
struct Changed<'l, 'a> {
    live: &'l Live<'a>,
    change: Change,
    appends: bool,
}

impl Changed<'_, '_> {
    fn new<'l, 'a>(live: &'l Live<'a>, change: Change) -> Changed<'l, 'a> {
        let appends = match change {
            Change::Add { bucket, .. } => {
                live.end == 0 || live.entry(live.end - 1).bucket != bucket
            }
            Change::Lower { .. } => false,
        };
        Changed {
            live,
            change,
            appends,
        }
    }

    fn end(&self) -> usize {
        self.live.end + usize::from(self.appends)
    }

    /// The first entry the change touches.
    fn first_changed(&self) -> usize {
        match self.change {
            Change::Add { .. } => self.end() - 1,
            Change::Lower { lowest, .. } => lowest,
        }
    }

    fn entry(&self, index: usize) -> Entry {
        match self.change {
            Change::Add { bucket, quantity } if index == self.end() - 1 => {
                let count = if self.appends {
                    0
                } else {
                    self.live.entry(index).count
                };
                Entry {
                    bucket,
                    count: count.saturating_add(quantity),
                }
            }
            Change::Lower {
                lowest,
                count,
                upto,
            } if (lowest..=upto).contains(&index) => Entry {
                bucket: self.live.entry(index).bucket,
                count: if index == lowest { count } else { 0 },
            },
            _ => self.live.entry(index),
        }
    }
}

impl WindowLimiter {
    /// Loads a bucket log (or a first-release state, or one kept with other parameters, or
    /// none) as of bucket `current`, dropping what left the window. The second value says
    /// whether the stored entries are used in place.
    fn live<'a>(
        &self,
        stored: Option<&'a [u8]>,
        current: i64,
        scratch: &'a mut Vec<Entry>,
    ) -> Result<(Live<'a>, i64), StateError> {
        let buckets = self.buckets_per_window() as u16;
        let mut live = match stored {
            None => Live {
                stored: None,
                built: &[],
                front: 0,
                end: 0,
                total: 0,
                newest: 0,
            },
            Some(value) => match value.first() {
                Some(&LIMITED_TAG | &TAG) => {
                    let log = Stored::parse(value)?;
                    // Counts are read as counted, whatever limit counted them.
                    if log.buckets == buckets && log.window == self.window_micros() {
                        Live {
                            stored: Some(log),
                            built: &[],
                            front: log.front,
                            end: log.len,
                            total: log.total,
                            newest: log.newest,
                        }
                    } else {
                        self.rebuild_from_other(&log, scratch)?;
                        built(scratch)
                    }
                }
                Some(&BUCKETS_V1_TAG) => {
                    self.rebuild_from_first_release(value, scratch)?;
                    built(scratch)
                }
                _ => return Err(self.foreign_or_other(value)),
            },
        };
        // A clock that went back keeps counting in the newest bucket the state knows.
        let current = match live.end {
            0 => current,
            end => current.max(live.entry(end - 1).bucket),
        };
        let first_in_window = current - self.buckets_per_window() + 1;
        while live.front < live.end && live.entry(live.front).bucket < first_in_window {
            live.total = live.total.saturating_sub(live.entry(live.front).count);
            live.front += 1;
        }
        if live.total == 0 || live.newest < live.front {
            live.total = 0;
        }
        Ok((live, current))
    }

    fn foreign_or_other(&self, value: &[u8]) -> StateError {
        match value.first() {
            Some(&tag) if is_window_tag(tag) => StateError::OtherAlgorithm,
            _ => StateError::Foreign,
        }
    }

    /// Rebuilds, in `scratch`, the live entries of a log kept with another `n` or window:
    /// each bucket's count moves to the bucket (under this limiter) where it began.
    fn rebuild_from_other(&self, log: &Stored, scratch: &mut Vec<Entry>) -> Result<(), StateError> {
        let old = WindowLimiter::new(
            1,
            log.window,
            Unit::Microseconds,
            Algorithm::Buckets(log.buckets),
        )
        .map_err(|_| StateError::Foreign)?;
        scratch.clear();
        for index in log.front..log.len {
            let entry = log.entry(index);
            let bucket = self.bucket_of(old.bucket_start(entry.bucket.max(0)));
            push_merged(scratch, bucket, entry.count);
        }
        Ok(())
    }

    /// Rebuilds, in `scratch`, the entries of a first-release state (all `n` counts).
    fn rebuild_from_first_release(
        &self,
        value: &[u8],
        scratch: &mut Vec<Entry>,
    ) -> Result<(), StateError> {
        let mut counts = Vec::new();
        let start = self.decode(value, &mut counts)?;
        let newest = self.bucket_of(start);
        scratch.clear();
        for (age, &count) in counts.iter().rev().enumerate().rev() {
            push_merged(scratch, newest - age as i64, count);
        }
        Ok(())
    }

    /// Decides a request of `quantity` at `now` (µs since the epoch) on a bucket log. The new state, when the
    /// request changes it, is appended to `value`: whole, or (when `patch` allows it) only
    /// the bytes it changes.
    pub(super) fn apply_buckets(
        &self,
        stored: Option<&[u8]>,
        now: i64,
        quantity: u64,
        patch: bool,
        scratch: &mut Vec<Entry>,
        value: &mut Vec<u8>,
    ) -> Result<WindowOutcome, StateError> {
        let (live, current) = self.live(stored, self.bucket_of(now), scratch)?;
        let used = live.total;
        let admitted = quantity <= self.limit() && used.saturating_add(quantity) <= self.limit();
        let charged = if admitted { quantity } else { 0 };
        let retry_at = (!admitted && quantity <= self.limit())
            .then(|| self.freed_at(&live, used.saturating_add(quantity) - self.limit()));
        let newest_bucket = if charged > 0 {
            Some(current)
        } else {
            live.newest_bucket()
        };
        let verdict = Verdict {
            limited: !admitted,
            limit: self.limit() as i64,
            remaining: self.limit().saturating_sub(used + charged) as i64,
            retry_after: retry_at.map_or(RetryAfter::NONE, |at| {
                RetryAfter::of(Micros::saturating((at - now).max(0)).ticks())
            }),
            reset_after: self.reset_after_buckets(newest_bucket, now),
        };
        if charged == 0 {
            return Ok(WindowOutcome {
                verdict,
                expire_at: None,
                placement: Placement::WHOLE,
            });
        }
        let change = Change::Add {
            bucket: current,
            quantity: charged,
        };
        let placement = self.write(&live, change, used + charged, patch, value);
        Ok(WindowOutcome {
            verdict,
            expire_at: Some(self.expire_at(current)),
            placement,
        })
    }

    /// [`WindowLimiter::queue_end`] for a bucket log: the start of its last entry's bucket
    /// (0 for a log kept with other parameters, which is rebuilt before it counts).
    pub(super) fn buckets_queue_end(&self, value: &[u8]) -> i64 {
        match Stored::parse(value) {
            Ok(log)
                if log.len > 0
                    && log.buckets == self.buckets_per_window() as u16
                    && log.window == self.window_micros() =>
            {
                self.bucket_start(log.last)
            }
            _ => 0,
        }
    }

    /// Gives back `quantity` at `now` (µs since the epoch) on a bucket log: from the newest
    /// counts first.
    pub(super) fn refund_buckets(
        &self,
        stored: Option<&[u8]>,
        now: i64,
        quantity: u64,
        patch: bool,
        scratch: &mut Vec<Entry>,
        value: &mut Vec<u8>,
    ) -> Result<WindowRefund, StateError> {
        let (live, _) = self.live(stored, self.bucket_of(now), scratch)?;
        let mut left = quantity;
        let mut lowest = None;
        if live.total > 0 {
            let mut index = live.newest;
            loop {
                let count = live.entry(index).count;
                let returned = left.min(count);
                left -= returned;
                lowest = Some((index, count - returned));
                if left == 0 || index == live.front {
                    break;
                }
                index -= 1;
            }
        }
        let returned = quantity - left;
        let lowered = lowest.filter(|_| returned > 0);
        // The newest count left after: at or below the lowest entry lowered.
        let newest = match lowered {
            Some((lowest, count)) if count > 0 => Some(lowest),
            Some((lowest, _)) => (live.front..lowest)
                .rev()
                .find(|&i| live.entry(i).count > 0),
            None => (live.total > 0).then_some(live.newest),
        };
        // A bucket scheduled ahead of `now` (`DELAY`, `FORCE`) stands for the buckets
        // before it, which the log no longer holds: emptied, it stays as the newest entry
        // until its time, so that later requests still queue behind it.
        let scheduled = live
            .end
            .checked_sub(1)
            .filter(|&last| live.entry(last).bucket > self.bucket_of(now));
        let newest = newest.or(scheduled.filter(|_| returned > 0));
        let total = match newest {
            Some(_) => live.total - returned,
            None => 0,
        };
        let newest_bucket = newest.map(|index| live.entry(index).bucket);
        let verdict = Verdict {
            limited: total > self.limit(),
            limit: self.limit() as i64,
            remaining: self.limit().saturating_sub(total) as i64,
            retry_after: RetryAfter::NONE,
            reset_after: self.reset_after_buckets(newest_bucket, now),
        };
        let placement = match (lowered, newest) {
            (Some((lowest, count)), Some(newest)) => {
                let change = Change::Lower {
                    lowest,
                    count,
                    upto: live.newest,
                };
                let live = Live { newest, ..live };
                self.write(&live, change, total, patch, value)
            }
            _ => Placement::WHOLE,
        };
        Ok(WindowRefund {
            verdict,
            changed: returned > 0,
            expire_at: newest_bucket.map(|bucket| self.expire_at(bucket)),
            placement,
        })
    }

    /// When enough of the oldest counts have left the window to free `excess`.
    fn freed_at(&self, live: &Live, excess: u64) -> i64 {
        let mut freed = 0u64;
        for index in live.front..live.end {
            let entry = live.entry(index);
            freed = freed.saturating_add(entry.count);
            if freed >= excess {
                return self.bucket_start(entry.bucket + self.buckets_per_window());
            }
        }
        // Unreachable: the counts add up to the excess at most; the last leaving frees all.
        let last = live
            .end
            .checked_sub(1)
            .map_or(0, |end| live.entry(end).bucket);
        self.bucket_start(last + self.buckets_per_window())
    }

    fn reset_after_buckets(&self, newest_bucket: Option<i64>, now: i64) -> Ticks {
        newest_bucket.map_or(Ticks::ZERO, |bucket| {
            Micros::saturating((self.bucket_start(bucket + self.buckets_per_window()) - now).max(0))
                .ticks()
        })
    }

    /// When the key may go: once bucket `newest` has left the window.
    fn expire_at(&self, newest: i64) -> Millis {
        ceil_millis(self.bucket_start(newest + self.buckets_per_window()))
    }

    /// Appends the state after `change` to `value`: only the bytes from the first changed
    /// entry on when `patch` allows and the stored entries can take the change in place,
    /// else the whole value, compacted. `total` is the sum of the counts after.
    fn write(
        &self,
        live: &Live,
        change: Change,
        total: u64,
        patch: bool,
        value: &mut Vec<u8>,
    ) -> Placement {
        let changed = Changed::new(live, change);
        let end = changed.end();
        let newest = match change {
            Change::Add { .. } => end - 1,
            Change::Lower { .. } => live.newest,
        };
        // A log of another layout is rewritten whole, in this one.
        if let Some(stored) = live.stored.filter(|stored| patch && !stored.limited) {
            let first = changed.first_changed();
            let fits = changed.entry(first).count <= max_count(stored.width);
            // Nothing left in the window starts over; dropped entries outnumbering the live
            // ones go, at a cost no more than the drops that preceded.
            let compact = live.front == live.end
                || (live.front >= COMPACT_AFTER && live.front > end - live.front);
            if fits && !compact && end <= u16::MAX as usize {
                let entry_len = ID_LEN + stored.width;
                for index in first..end {
                    push_entry(value, changed.entry(index), stored.width);
                }
                let last = changed.entry(end - 1).bucket;
                self.push_trailer(value, live.front, newest, last, stored.width, total);
                let expiry_kept = stored.total > 0
                    && stored.newest < stored.len
                    && stored.entry(stored.newest).bucket == changed.entry(newest).bucket;
                return Placement {
                    at: 1 + first * entry_len,
                    expiry_kept,
                };
            }
        }
        // The whole value: the entries with a count (and the newest, which has one unless it
        // is a scheduled bucket emptied by a refund), in the fewest bytes that hold both the
        // limit and every count.
        let changed = &changed;
        let counted = || {
            (live.front..end)
                .filter(move |&i| i == newest || changed.entry(i).count > 0)
                .map(move |i| changed.entry(i))
        };
        let largest = counted().map(|e| e.count).fold(self.limit(), u64::max);
        let width = [1, 2, 4, 8]
            .into_iter()
            .find(|&width| largest <= max_count(width))
            .unwrap_or(8);
        value.push(TAG);
        let mut kept = 0;
        let mut last = 0;
        for entry in counted() {
            push_entry(value, entry, width);
            kept += 1;
            last = entry.bucket;
        }
        self.push_trailer(value, 0, kept.max(1) - 1, last, width, total);
        Placement::WHOLE
    }

    fn push_trailer(
        &self,
        value: &mut Vec<u8>,
        front: usize,
        newest: usize,
        last: i64,
        width: usize,
        total: u64,
    ) {
        let width_code = width.trailing_zeros() as u64;
        value.extend_from_slice(&(front as u16).to_le_bytes());
        value.extend_from_slice(&(newest as u16).to_le_bytes());
        value.extend_from_slice(&(self.buckets_per_window() as u16).to_le_bytes());
        value.extend_from_slice(&(self.window_micros() as u64).to_le_bytes()[..7]);
        let last_word = (last as u64 & ((1 << LAST_BITS) - 1)) | width_code << LAST_BITS;
        value.extend_from_slice(&last_word.to_le_bytes()[..7]);
        value.extend_from_slice(&total.to_le_bytes());
    }
}

fn built(scratch: &[Entry]) -> Live<'_> {
    let newest = scratch.iter().rposition(|entry| entry.count > 0);
    Live {
        stored: None,
        built: scratch,
        front: 0,
        end: scratch.len(),
        total: scratch
            .iter()
            .fold(0, |sum: u64, entry| sum.saturating_add(entry.count)),
        newest: newest.unwrap_or_default(),
    }
}

/// Appends `count` in `bucket` to entries in bucket order, merged with the last if the same.
fn push_merged(entries: &mut Vec<Entry>, bucket: i64, count: u64) {
    if count == 0 {
        return;
    }
    match entries.last_mut() {
        Some(last) if last.bucket == bucket => last.count = last.count.saturating_add(count),
        _ => entries.push(Entry { bucket, count }),
    }
}

fn push_entry(value: &mut Vec<u8>, entry: Entry, width: usize) {
    value.extend_from_slice(&(entry.bucket as u16).to_le_bytes());
    value.extend_from_slice(&entry.count.to_le_bytes()[..width]);
}

fn max_count(width: usize) -> u64 {
    match width {
        8 => u64::MAX,
        width => (1 << (8 * width)) - 1,
    }
}

#[cfg(test)]
mod tests;
