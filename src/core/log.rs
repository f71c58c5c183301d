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

use super::params::{self, ParamError, MAX_LOG_LIMIT};
use super::ring::{self, Native, Ring};
use super::time::{Micros, Millis, Unit};
use super::verdict::{RetryAfter, Verdict};

/// Bits of an entry holding its count minus one.
const COUNT_BITS: u32 = 10;
/// The most one entry counts.
const MAX_ENTRY_COUNT: u64 = 1 << COUNT_BITS;
/// Bytes of an entry in the serialized form.
pub const ENTRY_LEN: usize = 8;

/// The log's storage: three header words (the ring's, the total, the block's end) and
/// entries of one word, positions in 21 bits (up to 2^20 entries).
type LogRing = Ring<3, 1, 21>;

const _: () = assert!(MAX_LOG_LIMIT as usize <= LogRing::MAX_ENTRIES);

/// The kind tag of a log in the native type's storage.
pub const LOG_KIND: u8 = 0;

/// Header words: the ring's own, the sum of the counts, the end of a penalty block.
const TOTAL_WORD: usize = 1;
const BLOCKED_WORD: usize = 2;

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

/// One key's log: its entries, oldest first, in one allocation with the sum of their counts
/// and the end of the key's penalty block (`BLOCK`), if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlidingLog {
    ring: LogRing,
}

impl Default for SlidingLog {
    fn default() -> Self {
        SlidingLog {
            ring: LogRing::with_capacity(LOG_KIND, 0),
        }
    }
}

impl SlidingLog {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether the log holds nothing.
    #[cfg_attr(not(test), allow(dead_code))] // Beside `len`, as clippy asks.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// The sum of the entries' counts.
    pub fn total(&self) -> u64 {
        self.ring.header(TOTAL_WORD)
    }

    fn set_total(&mut self, total: u64) {
        self.ring.set_header(TOTAL_WORD, total);
    }

    /// When the key's penalty block ends, or `Micros::ZERO` for none.
    pub fn blocked_until(&self) -> Micros {
        Micros::saturating(self.ring.header(BLOCKED_WORD) as i64)
    }

    /// Sets the end of the key's penalty block (`Micros::ZERO`: none).
    pub fn set_blocked_until(&mut self, until: Micros) {
        self.ring
            .set_header(BLOCKED_WORD, until.get().max(0) as u64);
    }

    /// The entries, oldest first.
    fn entries(&self) -> impl DoubleEndedIterator<Item = u64> + '_ {
        self.ring.iter().map(|[entry]| entry)
    }

    /// Bytes of memory the log holds: its one allocation.
    pub fn allocated_bytes(&self) -> usize {
        self.ring.allocated_bytes()
    }

    /// The entries from `first` on, `ENTRY_LEN` little-endian bytes each, appended to `out`.
    pub fn serialize(&self, first: usize, count: usize, out: &mut Vec<u8>) {
        for index in first..(first.saturating_add(count)).min(self.len()) {
            out.extend_from_slice(&self.ring.get(index)[0].to_le_bytes());
        }
    }

    /// Appends serialized entries. `None` (and the log unchanged) when `bytes` is not a whole
    /// number of entries, or its times go back, or the log would grow beyond what any limit
    /// lets it hold.
    pub fn append_serialized(&mut self, bytes: &[u8]) -> Option<()> {
        if bytes.len() % ENTRY_LEN != 0 {
            return None;
        }
        let mut last = self.newest_time().unwrap_or(0);
        let mut total = self.total();
        for chunk in bytes.chunks_exact(ENTRY_LEN) {
            let entry = u64::from_le_bytes(chunk.try_into().ok()?);
            if entry_time(entry) < last {
                return None;
            }
            last = entry_time(entry);
            total = total.checked_add(entry_count(entry))?;
        }
        let entries = self.len() + bytes.len() / ENTRY_LEN;
        if entries > MAX_LOG_LIMIT as usize {
            return None;
        }
        self.ring.reserve(entries)?;
        for chunk in bytes.chunks_exact(ENTRY_LEN) {
            let entry = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            self.ring.push_back([entry])?;
        }
        self.set_total(total);
        Some(())
    }

    fn newest_time(&self) -> Option<i64> {
        self.ring.back().map(|[entry]| entry_time(entry))
    }

    /// When its newest entry counts from (`Micros::ZERO` for an empty log): a request logged
    /// later counts no earlier.
    pub fn newest(&self) -> Micros {
        Micros::saturating(self.newest_time().unwrap_or(0))
    }

    /// Drops the `entries` oldest entries, giving memory back when the log is left mostly
    /// empty.
    fn drop_oldest_entries(&mut self, entries: usize) {
        if entries > 0 {
            self.drop_oldest_entries_now(entries);
        }
    }

    /// [`SlidingLog::drop_oldest_entries`] of at least one entry.
    fn drop_oldest_entries_now(&mut self, entries: usize) {
        let mut total = self.total();
        for _ in 0..entries {
            let [entry] = self.ring.pop_front().expect("as many entries as counted");
            total -= entry_count(entry);
        }
        self.set_total(total);
        self.ring.shrink_if_sparse();
    }

    /// Drops every entry (a block starting from none).
    pub fn clear(&mut self) {
        self.drop_oldest_entries(self.len());
    }

    /// Drops the `units` oldest units of quantity, splitting an entry if need be.
    fn drop_oldest_units(&mut self, mut units: u64) {
        let mut total = self.total();
        while units > 0 {
            let Some([oldest]) = self.ring.front() else {
                break;
            };
            let count = entry_count(oldest);
            if count > units {
                self.ring.set(0, [entry(entry_time(oldest), count - units)]);
                total -= units;
                break;
            }
            self.ring.pop_front();
            total -= count;
            units -= count;
        }
        self.set_total(total);
        self.ring.shrink_if_sparse();
    }

    /// Drops the `units` newest units of quantity, splitting an entry if need be.
    fn drop_newest_units(&mut self, mut units: u64) {
        let mut total = self.total();
        while units > 0 {
            let Some([newest]) = self.ring.back() else {
                break;
            };
            let count = entry_count(newest);
            if count > units {
                let last = self.len() - 1;
                self.ring
                    .set(last, [entry(entry_time(newest), count - units)]);
                total -= units;
                break;
            }
            self.ring.pop_back();
            total -= count;
            units -= count;
        }
        self.set_total(total);
        self.ring.shrink_if_sparse();
    }

    /// Logs `quantity` at `now`, or at the newest entry's time if that is later (a clock
    /// never goes back in a log), growing the ring by at most `room_for` entries in total.
    /// Only dropping entries leaves a log sparse, so only the drops give memory back.
    fn push(&mut self, now: i64, mut quantity: u64, room_for: usize) {
        let mut total = self.total();
        let mut time = now;
        if let Some(newest) = self.ring.back_mut() {
            time = entry_time(newest[0]).max(now);
            let count = entry_count(newest[0]);
            if entry_time(newest[0]) == time && count < MAX_ENTRY_COUNT {
                let merged = quantity.min(MAX_ENTRY_COUNT - count);
                newest[0] = entry(time, count + merged);
                total += merged;
                quantity -= merged;
            }
        }
        while quantity > 0 {
            let count = quantity.min(MAX_ENTRY_COUNT);
            self.ring
                .push_back_bounded([entry(time, count)], room_for)
                .expect("a log holds at most its limit, below the ring's maximum");
            total += count;
            quantity -= count;
        }
        self.set_total(total);
    }
}

impl Native for SlidingLog {
    const KIND: u8 = LOG_KIND;

    fn into_words(self) -> Box<[u64]> {
        self.ring.into_words()
    }

    fn from_words(words: Box<[u64]>) -> Self {
        SlidingLog {
            ring: LogRing::from_words(words),
        }
    }

    fn allocation_words(first_word: u64) -> usize {
        ring::allocation_words::<3, 1, 21>(first_word)
    }
}

/// A sliding log's parameters, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogLimiter {
    limit: u64,
    /// The window, in microseconds.
    window: i64,
}

/// What the log holds at an instant: found once per call ([`LogLimiter::survey`]) and
/// carried from the decision to the change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Live {
    /// Entries at the front that have left the window.
    pub expired_entries: usize,
    /// Units of quantity still in the window.
    pub used: u64,
}

impl LogLimiter {
    /// Validates the parameters: at most `limit` per `window` `unit`s.
    pub fn new(limit: i64, window: i64, unit: Unit) -> Result<LogLimiter, ParamError> {
        let limit = params::limit(limit)?;
        if limit > MAX_LOG_LIMIT {
            return Err(ParamError::LimitTooHighForLog);
        }
        Ok(LogLimiter {
            limit,
            window: params::window(window, unit)?.get(),
        })
    }

    /// The largest quantity ever admitted.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window.
    pub fn window(&self) -> Micros {
        Micros::saturating(self.window)
    }

    /// What `log` holds at `now`.
    pub fn survey(&self, log: Option<&SlidingLog>, now: Micros) -> Live {
        self.live(log, now.not_before_epoch().get())
    }

    fn live(&self, log: Option<&SlidingLog>, now: i64) -> Live {
        let mut live = Live {
            expired_entries: 0,
            used: log.map_or(0, SlidingLog::total),
        };
        let Some(log) = log else {
            return live;
        };
        for entry in log.entries() {
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
    #[cfg(test)]
    pub fn inspect(&self, log: Option<&SlidingLog>, now: Micros, quantity: u64) -> Verdict {
        let now = now.not_before_epoch();
        self.verdict(log, &self.live(log, now.get()), now.get(), quantity)
    }

    /// [`LogLimiter::inspect`], given what the log holds at `now` ([`LogLimiter::survey`]).
    pub fn inspect_surveyed(
        &self,
        log: Option<&SlidingLog>,
        live: &Live,
        now: Micros,
        quantity: u64,
    ) -> Verdict {
        self.verdict(log, live, now.not_before_epoch().get(), quantity)
    }

    fn verdict(&self, log: Option<&SlidingLog>, live: &Live, now: i64, quantity: u64) -> Verdict {
        let admitted = quantity <= self.limit && live.used.saturating_add(quantity) <= self.limit;
        let charged = if admitted { quantity } else { 0 };
        let newest = log.and_then(SlidingLog::newest_time);
        let reset_at = if charged > 0 {
            Some(newest.map_or(now, |newest| newest.max(now)))
        } else {
            newest.filter(|_| live.used > 0)
        };
        Verdict {
            limited: !admitted,
            limit: self.limit as i64,
            remaining: self.limit.saturating_sub(live.used + charged) as i64,
            retry_after: if !admitted && quantity <= self.limit {
                RetryAfter::of(Micros::saturating(self.retry_at(log, live, quantity) - now).ticks())
            } else {
                RetryAfter::NONE
            },
            reset_after: Micros::saturating(
                reset_at.map_or(0, |time| time + self.window - now).max(0),
            )
            .ticks(),
        }
    }

    /// When the oldest entries have left for `quantity` (at most `limit`) to fit.
    fn retry_at(&self, log: Option<&SlidingLog>, live: &Live, quantity: u64) -> i64 {
        let excess = live.used + quantity - self.limit;
        let mut freed = 0;
        for entry in log
            .into_iter()
            .flat_map(SlidingLog::entries)
            .skip(live.expired_entries)
        {
            freed += entry_count(entry);
            if freed >= excess {
                return entry_time(entry) + self.window;
            }
        }
        unreachable!("the live entries hold `used` units, at least the excess")
    }

    /// Decides a request of `quantity` (from 1 to `limit`) at `now` and logs it if admitted:
    /// [`LogLimiter::inspect`] and [`LogLimiter::log_surveyed`] in one step. Returns the
    /// verdict and whether the log changed.
    #[cfg(test)]
    pub fn apply(&self, log: &mut SlidingLog, now: Micros, quantity: u64) -> (Verdict, bool) {
        let (live, trimmed) = self.trim(log, self.survey(Some(log), now));
        let verdict = self.verdict(Some(log), &live, now.not_before_epoch().get(), quantity);
        let logged = self.log_surveyed(log, live, now, quantity);
        (verdict, trimmed || logged)
    }

    /// Logs a request of `quantity` (from 1 to `limit`) at `now` if it fits, given what the
    /// log holds then ([`LogLimiter::survey`]); returns whether the log changed.
    pub fn log_surveyed(
        &self,
        log: &mut SlidingLog,
        live: Live,
        now: Micros,
        quantity: u64,
    ) -> bool {
        debug_assert!((1..=self.limit).contains(&quantity));
        debug_assert_eq!(live, self.survey(Some(log), now));
        let now = now.not_before_epoch().get();
        let (live, trimmed) = self.trim(log, live);
        if live.used + quantity > self.limit {
            return trimmed;
        }
        log.drop_oldest_entries(live.expired_entries);
        log.push(now, quantity, self.limit.try_into().unwrap_or(usize::MAX));
        true
    }

    /// What `log` counts at `now` (`RL.LOG.COUNTS`): the units in the window, when its
    /// oldest entry leaves it and when its newest does (both `now` for an empty log).
    pub fn counts(&self, log: Option<&SlidingLog>, now: Micros) -> (u64, Micros, Micros) {
        let now = now.not_before_epoch();
        let live = self.survey(log, now);
        let Some(log) = log.filter(|_| live.used > 0) else {
            return (0, now, now);
        };
        let oldest = log
            .entries()
            .nth(live.expired_entries)
            .map_or(now.get(), entry_time);
        let newest = log.newest_time().unwrap_or(now.get());
        (
            live.used,
            Micros::saturating(oldest + self.window),
            Micros::saturating(newest + self.window),
        )
    }

    /// Whether `log` has room for the entries a request of `quantity` may add: a log never
    /// holds more than [`MAX_LOG_LIMIT`] entries, requests scheduled ahead included.
    pub fn has_room_for(&self, log: Option<&SlidingLog>, quantity: u64) -> bool {
        let held = log.map_or(0, SlidingLog::len) as u64;
        held + quantity.div_ceil(MAX_ENTRY_COUNT) < MAX_LOG_LIMIT
    }

    /// Logs `quantity` (at most [`crate::core::params::MAX_DEBT_LIMITS`] times the limit)
    /// from `now` on whatever it takes (`FORCE`): what fits is logged now, the rest at the
    /// earliest times it fits, a limit's worth at a time, after everything logged before.
    /// Returns when the last part counts from.
    pub fn force(&self, log: &mut SlidingLog, now: Micros, quantity: u64) -> Micros {
        let mut at = now
            .not_before_epoch()
            .get()
            .max(log.newest_time().unwrap_or(0));
        let mut left = quantity;
        while left > 0 {
            let live = self.live(Some(log), at);
            let part = left.min(self.limit.saturating_sub(live.used));
            if part == 0 {
                // Every step forward frees at least one entry's units.
                at = self
                    .retry_at(Some(log), &live, left.min(self.limit))
                    .max(at + 1);
                continue;
            }
            log.drop_oldest_entries(live.expired_entries);
            log.push(at, part, MAX_LOG_LIMIT as usize);
            left -= part;
        }
        Micros::saturating(at)
    }

    /// A log holding more than `limit` units (the limit was lowered) drops its oldest units
    /// down to `limit`: the replies are the same, and later calls stay cheap. Returns what
    /// it holds after, and whether it changed.
    fn trim(&self, log: &mut SlidingLog, live: Live) -> (Live, bool) {
        if live.used <= self.limit {
            return (live, false);
        }
        log.drop_oldest_entries(live.expired_entries);
        log.drop_oldest_units(live.used - self.limit);
        let live = Live {
            expired_entries: 0,
            used: self.limit,
        };
        (live, true)
    }

    /// Gives back `quantity` at `now`: the newest units still in the window leave the log,
    /// never more than it holds there (the expired ones go too). Returns the standing after,
    /// as a peek sees it, and whether the log changed.
    pub fn refund(&self, log: &mut SlidingLog, now: Micros, quantity: u64) -> (Verdict, bool) {
        let now = now.not_before_epoch().get();
        let live = self.live(Some(log), now);
        let returned = quantity.min(live.used);
        if returned > 0 {
            log.drop_oldest_entries(live.expired_entries);
            log.drop_newest_units(returned);
        }
        let live = self.live(Some(log), now);
        (self.verdict(Some(log), &live, now, 0), returned > 0)
    }

    /// Whether the log holds nothing that still counts at `now`.
    pub fn is_spent(&self, log: &SlidingLog, now: Micros) -> bool {
        self.live_units(Some(log), now) == 0
    }

    /// Units of quantity the log holds that still count at `now`.
    pub fn live_units(&self, log: Option<&SlidingLog>, now: Micros) -> u64 {
        self.survey(log, now).used
    }

    /// When the key should expire: when its newest entry leaves the window.
    pub fn expire_at(&self, log: &SlidingLog) -> Millis {
        Micros::saturating(log.newest_time().unwrap_or(0) + self.window).ceil_millis()
    }
}

#[cfg(test)]
mod tests;
