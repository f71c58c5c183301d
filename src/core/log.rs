//! The exact sliding log: every admitted request is logged with its time, and a request is
//! admitted only if the quantities logged in the last `window`, plus its own, stay within
//! `limit`.
//!
//! The log is a ring of 8-byte entries, oldest first: the time in microseconds (54 bits)
//! and a count of 1 to 1024 (10 bits), so a request of any quantity usually takes one
//! entry, and requests in the same microsecond share one. An entry logged at `t` counts
//! while `now < t + window`. Entries that left the window are dropped when a request is
//! admitted, so the log never holds more than `limit` entries and each call costs O(1)
//! amortised.

use std::collections::VecDeque;

use super::time::{from_micros, Unit};
use super::verdict::Verdict;
use super::window::{validate_limit, window_micros, WindowError};

/// Bits of an entry holding its count minus one.
const COUNT_BITS: u32 = 10;
/// The most one entry counts.
const MAX_ENTRY_COUNT: u64 = 1 << COUNT_BITS;
/// The highest `limit` a log takes: it bounds every call's work, since a request of
/// `quantity` takes up to `quantity / 1024` entries (1,024 at most), and a log's memory
/// (`limit` entries, 8 MiB).
pub const MAX_LIMIT: u64 = 1 << 20;
/// Bytes of an entry in the serialized form.
pub const ENTRY_LEN: usize = 8;

/// A logged request: its time and how much it counted.
fn entry(time: i64, count: u64) -> u64 {
    debug_assert!((1..=MAX_ENTRY_COUNT).contains(&count));
    ((time as u64) << COUNT_BITS) | (count - 1)
}

fn entry_time(entry: u64) -> i64 {
    (entry >> COUNT_BITS) as i64
}

fn entry_count(entry: u64) -> u64 {
    (entry & (MAX_ENTRY_COUNT - 1)) + 1
}

/// One key's log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlidingLog {
    entries: VecDeque<u64>,
    /// The sum of the entries' counts.
    total: u64,
}

impl SlidingLog {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log holds nothing.
    #[cfg_attr(not(test), allow(dead_code))] // Beside `len`, as clippy asks.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of memory the log holds, beyond its own fixed size.
    pub fn heap_size(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<u64>()
    }

    /// The entries from `first` on, `ENTRY_LEN` little-endian bytes each, appended to `out`.
    pub fn serialize(&self, first: usize, count: usize, out: &mut Vec<u8>) {
        for &entry in self.entries.range(first..(first + count).min(self.len())) {
            out.extend_from_slice(&entry.to_le_bytes());
        }
    }

    /// Appends serialized entries. `None` (and the log unchanged) when `bytes` is not a whole
    /// number of entries, or its times go back, or the total would overflow.
    pub fn append_serialized(&mut self, bytes: &[u8]) -> Option<()> {
        if bytes.len() % ENTRY_LEN != 0 {
            return None;
        }
        let mut last = self.entries.back().map_or(0, |&entry| entry_time(entry));
        let mut total = self.total;
        for chunk in bytes.chunks_exact(ENTRY_LEN) {
            let entry = u64::from_le_bytes(chunk.try_into().ok()?);
            if entry_time(entry) < last {
                return None;
            }
            last = entry_time(entry);
            total = total.checked_add(entry_count(entry))?;
        }
        self.entries.reserve_exact(bytes.len() / ENTRY_LEN);
        self.entries.extend(
            bytes
                .chunks_exact(ENTRY_LEN)
                .map(|chunk| u64::from_le_bytes(chunk.try_into().expect("8 bytes"))),
        );
        self.total = total;
        Some(())
    }

    fn newest_time(&self) -> Option<i64> {
        self.entries.back().map(|&entry| entry_time(entry))
    }

    /// Drops the `entries` oldest entries.
    fn drop_oldest_entries(&mut self, entries: usize) {
        for entry in self.entries.drain(..entries) {
            self.total -= entry_count(entry);
        }
    }

    /// Drops the `units` oldest units of quantity, splitting an entry if need be.
    fn drop_oldest_units(&mut self, mut units: u64) {
        while units > 0 {
            let Some(oldest) = self.entries.front_mut() else {
                return;
            };
            let count = entry_count(*oldest);
            if count > units {
                *oldest = entry(entry_time(*oldest), count - units);
                self.total -= units;
                return;
            }
            self.entries.pop_front();
            self.total -= count;
            units -= count;
        }
    }

    /// Logs `quantity` at `time` (not before the newest entry), growing the ring by at most
    /// `room_for` entries in total, and giving memory back when it is mostly empty.
    fn push(&mut self, time: i64, mut quantity: u64, room_for: usize) {
        if let Some(newest) = self.entries.back_mut() {
            let count = entry_count(*newest);
            if entry_time(*newest) == time && count < MAX_ENTRY_COUNT {
                let merged = quantity.min(MAX_ENTRY_COUNT - count);
                *newest = entry(time, count + merged);
                self.total += merged;
                quantity -= merged;
            }
        }
        while quantity > 0 {
            let count = quantity.min(MAX_ENTRY_COUNT);
            if self.entries.len() == self.entries.capacity() {
                // Doubling, but never beyond what the limit lets the log hold.
                let grow = self
                    .entries
                    .len()
                    .max(4)
                    .min(room_for.saturating_sub(self.len()));
                self.entries.reserve_exact(grow.max(1));
            }
            self.entries.push_back(entry(time, count));
            self.total += count;
            quantity -= count;
        }
        if self.entries.capacity() > 64 && self.entries.len() < self.entries.capacity() / 4 {
            self.entries.shrink_to(self.entries.len() * 2);
        }
    }
}

/// A sliding log's parameters, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogLimiter {
    limit: u64,
    /// The window, in microseconds.
    window: i64,
}

/// What the log holds at an instant.
struct Live {
    /// Entries at the front that have left the window.
    expired_entries: usize,
    /// Units of quantity still in the window.
    used: u64,
}

impl LogLimiter {
    /// Validates the parameters: at most `limit` per `window` `unit`s.
    pub fn new(limit: i64, window: i64, unit: Unit) -> Result<LogLimiter, WindowError> {
        let limit = validate_limit(limit)?;
        if limit > MAX_LIMIT {
            return Err(WindowError::LimitTooHighForLog);
        }
        Ok(LogLimiter {
            limit,
            window: window_micros(window, unit)?,
        })
    }

    /// The largest quantity ever admitted.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window, in microseconds.
    pub fn window_micros(&self) -> i64 {
        self.window
    }

    fn live(&self, log: &SlidingLog, now: i64) -> Live {
        let mut live = Live {
            expired_entries: 0,
            used: log.total,
        };
        for &entry in &log.entries {
            if entry_time(entry) + self.window > now {
                break;
            }
            live.expired_entries += 1;
            live.used -= entry_count(entry);
        }
        live
    }

    /// Decides a request of `quantity` at `now` (microseconds since the epoch) without
    /// changing anything: what a peek or an oversized request replies, and what a request
    /// that may be logged will reply.
    pub fn inspect(&self, log: Option<&SlidingLog>, now: i64, quantity: u64) -> Verdict {
        let empty = SlidingLog::default();
        let log = log.unwrap_or(&empty);
        self.verdict(log, &self.live(log, now), now, quantity)
    }

    fn verdict(&self, log: &SlidingLog, live: &Live, now: i64, quantity: u64) -> Verdict {
        let admitted = quantity <= self.limit && live.used.saturating_add(quantity) <= self.limit;
        let charged = if admitted { quantity } else { 0 };
        let reset_at = if charged > 0 {
            Some(self.logging_time(log, now))
        } else {
            log.newest_time().filter(|_| live.used > 0)
        };
        Verdict {
            limited: !admitted,
            limit: self.limit as i64,
            remaining: self.limit.saturating_sub(live.used + charged) as i64,
            retry_after: (!admitted && quantity <= self.limit)
                .then(|| self.retry_at(log, live, quantity) - now)
                .map(|micros| from_micros(micros.max(0))),
            reset_after: from_micros(reset_at.map_or(0, |time| time + self.window - now).max(0)),
        }
    }

    /// When the oldest entries have left for `quantity` (at most `limit`) to fit.
    fn retry_at(&self, log: &SlidingLog, live: &Live, quantity: u64) -> i64 {
        let excess = live.used + quantity - self.limit;
        let mut freed = 0;
        for &entry in log.entries.range(live.expired_entries..) {
            freed += entry_count(entry);
            if freed >= excess {
                return entry_time(entry) + self.window;
            }
        }
        unreachable!("the live entries hold `used` units, at least the excess")
    }

    /// The time a request admitted at `now` is logged at: never before the newest entry, so
    /// the log stays in order when the clock steps back.
    fn logging_time(&self, log: &SlidingLog, now: i64) -> i64 {
        log.newest_time().map_or(now, |newest| newest.max(now))
    }

    /// Decides a request of `quantity` (from 1 to `limit`) at `now` and logs it if admitted.
    /// A log holding more than `limit` units (the limit was lowered) first drops its oldest
    /// units down to `limit`: the replies are the same, and later calls stay cheap.
    /// Returns the verdict and whether the log changed.
    pub fn apply(&self, log: &mut SlidingLog, now: i64, quantity: u64) -> (Verdict, bool) {
        debug_assert!((1..=self.limit).contains(&quantity));
        let now = now.max(0);
        let mut live = self.live(log, now);
        let mut changed = false;
        if live.used > self.limit {
            log.drop_oldest_entries(live.expired_entries);
            log.drop_oldest_units(live.used - self.limit);
            live = Live {
                expired_entries: 0,
                used: self.limit,
            };
            changed = true;
        }
        let verdict = self.verdict(log, &live, now, quantity);
        if !verdict.limited {
            let time = self.logging_time(log, now);
            log.drop_oldest_entries(live.expired_entries);
            log.push(time, quantity, self.limit.try_into().unwrap_or(usize::MAX));
            changed = true;
        }
        (verdict, changed)
    }

    /// When the key should expire: when its newest entry leaves the window (Unix ms,
    /// rounded up).
    pub fn expire_at_ms(&self, log: &SlidingLog) -> i64 {
        let leaves = log.newest_time().unwrap_or(0) + self.window;
        (leaves + 999) / 1_000
    }
}

#[cfg(test)]
mod tests;
