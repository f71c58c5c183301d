//! The keys refused most often recently (`RL.TOP`): a Space-Saving summary (Metwally,
//! Agrawal and El Abbadi, 2005) of refused calls' keys per minute, over the current minute and
//! the previous one.
//!
//! A summary keeps at most `capacity` keys, each with a count that never undercounts and an
//! error that bounds the overcount: `count - error <= true count <= count`. A key not kept
//! was refused at most as often as the smallest count kept (0 while the summary has room),
//! and any key refused more than `total / capacity` times is kept. Counting a refusal is
//! O(1): the slots stay sorted by count, a count only ever grows by one, and it moves past
//! the last slot of its count by one swap. The slots are made once, at their capacity, and
//! a slot's key buffer is reused by the keys that take its place, so counting allocates
//! nothing once the buffers are as long as the keys (at most [`MAX_KEY_LEN`] bytes). Keys are
//! found by a 64-bit hash seeded at random per summary ([`KeyHash`]): two keys whose hashes
//! collide (a chance of about 2^-64 a pair) would be counted as one.
//!
//! Observational, like `SLOWLOG`: per server, neither replicated nor persisted.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use crate::core::time::Micros;

/// The most bytes of a key kept: a longer key is counted under its first `MAX_KEY_LEN`.
pub const MAX_KEY_LEN: usize = 256;
/// Keys kept per minute unless the module is told otherwise.
pub const DEFAULT_CAPACITY: usize = 128;
/// The most keys per minute the module may be told to keep.
pub const MAX_CAPACITY: usize = 100_000;

const MINUTE_US: i64 = 60_000_000;

/// One kept key, or a free slot (count 0).
#[derive(Clone, Debug, Default)]
struct Slot {
    /// The key; a buffer the next key to take the slot reuses.
    key: Vec<u8>,
    /// The key's hash: where the index finds it.
    hash: u64,
    count: u64,
    error: u64,
}

/// The hasher of maps whose keys are already spread (a keyed hash) or small integers (a
/// count): one multiplication (Fibonacci hashing), no SipHash round.
#[derive(Default)]
struct Spread(u64);

impl Hasher for Spread {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte) ^ self.0.rotate_left(8));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }
}

type SpreadMap = HashMap<u64, usize, BuildHasherDefault<Spread>>;

/// A Space-Saving summary of one minute's refusals.
#[derive(Clone, Debug)]
pub struct SpaceSaving {
    /// Sorted by count, smallest first; free slots (count 0) first of all.
    slots: Vec<Slot>,
    /// Where each kept key is, by its hash.
    index: SpreadMap,
    /// For each count held, the last (rightmost) slot holding it.
    last_of: SpreadMap,
    /// The hash of keys.
    hasher: KeyHash,
}

/// A key's 64-bit hash: eight bytes at a time, each folded in with a multiplication (the
/// 128-bit product's halves xored, as foldhash and wyhash do), from a seed drawn at random,
/// so that which keys collide cannot be known from outside the process. A tenth of SipHash's
/// work on a short key, which a refusal pays.
#[derive(Clone, Debug)]
struct KeyHash {
    seed: u64,
}

impl KeyHash {
    fn new() -> KeyHash {
        KeyHash {
            seed: RandomState::new().hash_one(0x5EED_u64) | 1,
        }
    }

    fn fold(a: u64, b: u64) -> u64 {
        let product = u128::from(a).wrapping_mul(u128::from(b));
        (product as u64) ^ ((product >> 64) as u64)
    }

    fn hash(&self, key: &[u8]) -> u64 {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut hash = self.seed ^ (key.len() as u64).wrapping_mul(K);
        let mut chunks = key.chunks_exact(8);
        for chunk in &mut chunks {
            let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
            hash = KeyHash::fold(hash ^ word, K);
        }
        let mut last = [0u8; 8];
        last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        KeyHash::fold(hash ^ u64::from_le_bytes(last), self.seed ^ K)
    }
}

/// A key's estimate: refused at most `count` times, at least `count - error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Estimate {
    pub key: Vec<u8>,
    pub count: u64,
    pub error: u64,
}

impl SpaceSaving {
    /// An empty summary keeping at most `capacity` keys (at least one).
    pub fn new(capacity: usize) -> SpaceSaving {
        let capacity = capacity.max(1);
        let mut summary = SpaceSaving {
            slots: vec![Slot::default(); capacity],
            index: SpreadMap::with_capacity_and_hasher(capacity, Default::default()),
            last_of: SpreadMap::with_capacity_and_hasher(capacity, Default::default()),
            hasher: KeyHash::new(),
        };
        summary.clear();
        summary
    }

    /// Forgets every key, keeping the slots.
    pub fn clear(&mut self) {
        for slot in &mut self.slots {
            slot.key.clear();
            (slot.count, slot.error) = (0, 0);
        }
        self.index.clear();
        self.last_of.clear();
        self.last_of.insert(0, self.slots.len() - 1);
    }

    /// Counts one refusal of `key`.
    pub fn record(&mut self, key: &[u8]) {
        let key = &key[..key.len().min(MAX_KEY_LEN)];
        let hash = self.hasher.hash(key);
        let at = match self.index.get(&hash) {
            Some(&at) => at,
            None => {
                // The smallest slot: free, or the key refused least, which it replaces, its
                // count becoming the newcomer's error.
                let slot = &mut self.slots[0];
                if slot.count > 0 {
                    self.index.remove(&slot.hash);
                }
                slot.key.clear();
                slot.key.extend_from_slice(key);
                slot.hash = hash;
                slot.error = slot.count;
                self.index.insert(hash, 0);
                0
            }
        };
        self.increment(at);
    }

    /// Adds one to the count of the slot at `at`, keeping the slots sorted.
    fn increment(&mut self, at: usize) {
        let count = self.slots[at].count;
        let last = self.last_of[&count];
        if last != at {
            self.slots.swap(at, last);
            // The slot moved back holds a key, or is free (count 0) and indexed nowhere.
            if count > 0 {
                self.point(at);
            }
            self.point(last);
        }
        // `last` leaves its count's group, the group's last slot now the one before it.
        if last > 0 && self.slots[last - 1].count == count {
            self.last_of.insert(count, last - 1);
        } else {
            self.last_of.remove(&count);
        }
        self.slots[last].count = count + 1;
        // It joins the next count's group as its first slot: that group's last slot stays,
        // unless it starts the group.
        let joins = self
            .slots
            .get(last + 1)
            .is_some_and(|next| next.count == count + 1);
        if !joins {
            self.last_of.insert(count + 1, last);
        }
    }

    /// Points the index at the slot `at` for the key it holds (no allocation: the key is
    /// indexed already).
    fn point(&mut self, at: usize) {
        if let Some(place) = self.index.get_mut(&self.slots[at].hash) {
            *place = at;
        }
    }

    /// The most a key not kept may have been refused.
    pub fn floor(&self) -> u64 {
        self.slots[0].count
    }

    /// `key`'s count and error, if kept.
    pub fn get(&self, key: &[u8]) -> Option<(u64, u64)> {
        let key = &key[..key.len().min(MAX_KEY_LEN)];
        let at = *self.index.get(&self.hasher.hash(key))?;
        Some((self.slots[at].count, self.slots[at].error))
    }

    /// The kept keys, most refused first.
    pub fn kept(&self) -> impl Iterator<Item = &[u8]> {
        self.slots
            .iter()
            .rev()
            .take_while(|slot| slot.count > 0)
            .map(|slot| slot.key.as_slice())
    }

    /// How many keys it keeps at most.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

/// The refused keys of the current and the previous minute.
#[derive(Clone, Debug)]
pub struct TopKeys {
    current: SpaceSaving,
    previous: SpaceSaving,
    /// The current minute, numbered from the epoch.
    minute: i64,
}

impl TopKeys {
    /// Empty, keeping at most `capacity` keys a minute.
    pub fn new(capacity: usize) -> TopKeys {
        TopKeys {
            current: SpaceSaving::new(capacity),
            previous: SpaceSaving::new(capacity),
            minute: i64::MIN,
        }
    }

    /// How many keys a minute it keeps.
    pub fn capacity(&self) -> usize {
        self.current.capacity()
    }

    /// Counts a refusal of `key` at `now`.
    pub fn record(&mut self, key: &[u8], now: Micros) {
        self.roll(now);
        self.current.record(key);
    }

    /// Forgets everything.
    pub fn reset(&mut self) {
        self.current.clear();
        self.previous.clear();
    }

    /// Moves on to `now`'s minute: the current minute becomes the previous one, or both are
    /// forgotten after a minute without refusals.
    fn roll(&mut self, now: Micros) {
        let minute = now.0.div_euclid(MINUTE_US);
        if minute == self.minute {
            return;
        }
        if minute == self.minute.saturating_add(1) {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear();
        } else if minute > self.minute {
            self.reset();
        }
        // A clock that went back keeps counting in the minute it knows.
        self.minute = self.minute.max(minute);
    }

    /// The `count` keys refused most over the current and the previous minute at `now`, most
    /// first (ties by key): a key not kept in a full minute's summary may have been refused
    /// as often as its smallest count, which the estimate and its error both carry.
    pub fn top(&mut self, count: usize, now: Micros) -> Vec<Estimate> {
        self.roll(now);
        let mut keys: Vec<&[u8]> = self.current.kept().chain(self.previous.kept()).collect();
        keys.sort_unstable();
        keys.dedup();
        let part = |summary: &SpaceSaving, key: &[u8]| {
            summary
                .get(key)
                .unwrap_or_else(|| (summary.floor(), summary.floor()))
        };
        let mut estimates: Vec<Estimate> = keys
            .into_iter()
            .map(|key| {
                let (now_count, now_error) = part(&self.current, key);
                let (then_count, then_error) = part(&self.previous, key);
                Estimate {
                    key: key.to_vec(),
                    count: now_count + then_count,
                    error: now_error + then_error,
                }
            })
            .collect();
        estimates.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        estimates.truncate(count);
        estimates
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn sorted(summary: &SpaceSaving) -> bool {
        summary
            .slots
            .windows(2)
            .all(|pair| pair[0].count <= pair[1].count)
    }

    #[test]
    fn a_stream_with_a_clear_order_is_exact_while_it_fits() {
        let mut top = TopKeys::new(4);
        let now = Micros(120 * MINUTE_US + 5);
        for (key, times) in [(&b"a"[..], 5), (b"b", 3), (b"c", 9), (b"d", 1)] {
            for _ in 0..times {
                top.record(key, now);
            }
        }
        let estimates = top.top(3, now);
        let got: Vec<(&[u8], u64, u64)> = estimates
            .iter()
            .map(|e| (&e.key[..], e.count, e.error))
            .collect();
        assert_eq!(got, [(&b"c"[..], 9, 0), (b"a", 5, 0), (b"b", 3, 0)]);
    }

    #[test]
    fn minutes_roll_and_a_quiet_minute_forgets() {
        let mut top = TopKeys::new(4);
        let minute = |m: i64| Micros(m * MINUTE_US);
        top.record(b"a", minute(10));
        top.record(b"a", minute(11));
        top.record(b"b", minute(11));
        let both = top.top(10, minute(11));
        assert_eq!((both[0].key.as_slice(), both[0].count), (&b"a"[..], 2));
        // The next minute still sees minute 11; two later, nothing.
        assert_eq!(top.top(10, minute(12)).len(), 2);
        assert!(top.top(10, minute(14)).is_empty());
        top.record(b"c", minute(14));
        top.reset();
        assert!(top.top(10, minute(14)).is_empty());
    }

    #[test]
    fn a_long_key_is_counted_under_its_first_bytes() {
        let mut summary = SpaceSaving::new(2);
        let long = vec![b'x'; MAX_KEY_LEN + 10];
        summary.record(&long);
        summary.record(&long[..MAX_KEY_LEN]);
        assert_eq!(summary.get(&long), Some((2, 0)));
    }

    proptest! {
        /// Against an exact count, on skewed random streams: every kept key's count is an
        /// upper bound and `count - error` a lower one; a key not kept was refused at most
        /// the smallest count; every key refused more than total / capacity times is kept.
        #[test]
        fn the_error_bound_holds_against_an_exact_count(
            capacity in 1usize..12,
            stream in prop::collection::vec((0u32..40, 0u32..40), 0..600),
        ) {
            let mut summary = SpaceSaving::new(capacity);
            let mut exact: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            for (a, b) in stream {
                // Skewed: the smaller of two draws, so low keys come far more often.
                let key = format!("k{}", a.min(b)).into_bytes();
                summary.record(&key);
                *exact.entry(key).or_default() += 1;
                prop_assert!(sorted(&summary));
            }
            let total: u64 = exact.values().sum();
            for (key, &truth) in &exact {
                match summary.get(key) {
                    Some((count, error)) => {
                        prop_assert!(count >= truth, "{count} < {truth}");
                        prop_assert!(count - error <= truth, "{count} - {error} > {truth}");
                    }
                    None => {
                        prop_assert!(truth <= summary.floor());
                        prop_assert!(truth * capacity as u64 <= total);
                    }
                }
            }
            prop_assert_eq!(summary.index.len(), exact.len().min(capacity));
        }

        /// Over two minutes, each estimate bounds the true count from both sides.
        #[test]
        fn the_two_minutes_merge_within_the_bound(
            capacity in 1usize..8,
            first in prop::collection::vec(0u8..20, 0..200),
            second in prop::collection::vec(0u8..20, 0..200),
        ) {
            let mut top = TopKeys::new(capacity);
            let mut exact: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            for (minute, stream) in [(7, &first), (8, &second)] {
                for key in stream {
                    let key = vec![b'k', *key];
                    top.record(&key, Micros(minute * MINUTE_US));
                    *exact.entry(key).or_default() += 1;
                }
            }
            for estimate in top.top(usize::MAX, Micros(8 * MINUTE_US)) {
                let truth = exact[&estimate.key];
                prop_assert!(estimate.count >= truth);
                prop_assert!(estimate.count - estimate.error <= truth);
            }
        }
    }
}
