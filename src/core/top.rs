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
/// Keys kept per minute unless the module is told otherwise: none, `RL.TOP` off, so that a
/// refusal costs nothing more until an operator asks (as Redis' latency monitor is off until
/// `latency-monitor-threshold` is set).
pub const DEFAULT_CAPACITY: usize = 0;
/// The most keys per minute the module may be told to keep.
pub const MAX_CAPACITY: usize = 100_000;

const MINUTE_US: i64 = 60_000_000;

/// One kept key, or a free slot (count 0). A slot stays where it is made; its place in the
/// order by count is [`SpaceSaving::order`]'s business.
#[derive(Clone, Debug, Default)]
struct Slot {
    /// The key; a buffer the next key to take the slot reuses.
    key: Vec<u8>,
    /// The key's hash: where the index finds it.
    hash: u64,
    count: u64,
    error: u64,
    /// Where the slot is in the order.
    place: usize,
    /// The group of slots with its count.
    group: usize,
}

/// The places (in the order) of the slots that share one count: `first..=last`.
#[derive(Clone, Copy, Debug, Default)]
struct Group {
    first: usize,
    last: usize,
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
///
/// Counting a refusal is O(1) with no map but the key's index touched: the slots are ordered
/// by count through `order`, and each run of one count is a [`Group`], so a slot whose count
/// grows swaps places with its group's last slot and moves into the next group (Metwally et
/// al.'s Stream-Summary, in arrays).
#[derive(Clone, Debug)]
pub struct SpaceSaving {
    /// The slots, made once.
    slots: Vec<Slot>,
    /// The slots by count, smallest first; free slots (count 0) first of all.
    order: Vec<usize>,
    /// The groups, by number; those not in use are in `spare_groups`.
    groups: Vec<Group>,
    spare_groups: Vec<usize>,
    /// Which slot holds each kept key, by its hash.
    index: SpreadMap,
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
            order: (0..capacity).collect(),
            groups: vec![Group::default(); capacity],
            spare_groups: Vec::with_capacity(capacity),
            index: SpreadMap::with_capacity_and_hasher(capacity, Default::default()),
            hasher: KeyHash::new(),
        };
        summary.clear();
        summary
    }

    /// Forgets every key, keeping the slots: every slot free, in one group.
    pub fn clear(&mut self) {
        for (at, slot) in self.slots.iter_mut().enumerate() {
            slot.key.clear();
            (slot.count, slot.error, slot.place, slot.group) = (0, 0, at, 0);
            self.order[at] = at;
        }
        self.groups[0] = Group {
            first: 0,
            last: self.slots.len() - 1,
        };
        self.spare_groups.clear();
        self.spare_groups.extend((1..self.groups.len()).rev());
        self.index.clear();
    }

    /// Counts one refusal of `key`.
    pub fn record(&mut self, key: &[u8]) {
        let key = &key[..key.len().min(MAX_KEY_LEN)];
        let hash = self.hasher.hash(key);
        let held = match self.index.get(&hash) {
            Some(&held) => held,
            None => {
                // The smallest slot: free, or the key refused least, which it replaces, its
                // count becoming the newcomer's error.
                let held = self.order[0];
                let slot = &mut self.slots[held];
                if slot.count > 0 {
                    self.index.remove(&slot.hash);
                }
                slot.key.clear();
                slot.key.extend_from_slice(key);
                slot.hash = hash;
                slot.error = slot.count;
                self.index.insert(hash, held);
                held
            }
        };
        self.increment(held);
    }

    /// Adds one to the count of slot `held`, keeping the order: it trades places with the
    /// last of its group, leaves the group and joins the next count's.
    fn increment(&mut self, held: usize) {
        let Slot { place, group, .. } = self.slots[held];
        let Group { first, last } = self.groups[group];
        if place != last {
            let other = self.order[last];
            self.order.swap(place, last);
            self.slots[other].place = place;
            self.slots[held].place = last;
        }
        if first == last {
            self.spare_groups.push(group);
        } else {
            self.groups[group].last = last - 1;
        }
        let count = self.slots[held].count + 1;
        self.slots[held].count = count;
        let next = self.order.get(last + 1).map(|&next| &self.slots[next]);
        self.slots[held].group = match next {
            Some(next) if next.count == count => {
                self.groups[next.group].first = last;
                next.group
            }
            _ => {
                // There is a spare: at most one group a slot, and this slot's left one.
                let joined = self.spare_groups.pop().unwrap_or(group);
                self.groups[joined] = Group { first: last, last };
                joined
            }
        };
    }

    /// The most a key not kept may have been refused.
    pub fn floor(&self) -> u64 {
        self.slots[self.order[0]].count
    }

    /// `key`'s count and error, if kept.
    pub fn get(&self, key: &[u8]) -> Option<(u64, u64)> {
        let key = &key[..key.len().min(MAX_KEY_LEN)];
        let at = *self.index.get(&self.hasher.hash(key))?;
        Some((self.slots[at].count, self.slots[at].error))
    }

    /// The `n` keys refused most, most first (fewer while fewer are kept): `O(n)`, a walk
    /// down the order by count from its top.
    pub fn most(&self, n: usize) -> impl Iterator<Item = &[u8]> {
        self.order
            .iter()
            .rev()
            .take(n)
            .map(|&held| &self.slots[held])
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
        let minute = now.get().div_euclid(MINUTE_US);
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

    /// The summaries of the minute of `now` and of the one before, as `top` reads them
    /// without moving on: `None` for a minute without a summary (never counted, or more
    /// than a minute ago). A clock that went back reads the minutes it knows.
    fn minutes_at(&self, now: Micros) -> (Option<&SpaceSaving>, Option<&SpaceSaving>) {
        let minute = now.get().div_euclid(MINUTE_US);
        if minute <= self.minute {
            (Some(&self.current), Some(&self.previous))
        } else if minute == self.minute + 1 {
            (None, Some(&self.current))
        } else {
            (None, None)
        }
    }

    /// The keys `top` weighs for `count`: each minute's [`candidates_per_minute`] most
    /// refused, each once.
    fn candidates(&self, count: usize, now: Micros) -> Vec<&[u8]> {
        let per_minute = candidates_per_minute(count);
        let (current, previous) = self.minutes_at(now);
        let mut keys: Vec<&[u8]> = current
            .into_iter()
            .chain(previous)
            .flat_map(|summary| summary.most(per_minute))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// The `count` keys refused most over the current and the previous minute at `now`, most
    /// first (ties by key): a key not kept in a full minute's summary may have been refused
    /// as often as its smallest count, which the estimate and its error both carry.
    ///
    /// The work is bounded by `count`, whatever the summaries' size: the candidates are each
    /// minute's `2 * count + 8` most refused keys ([`candidates_per_minute`]), each looked up
    /// in the other minute. A key outside both minutes' candidates is not listed even if its
    /// sum over the two would rank it; its own estimate and error stay true.
    pub fn top(&self, count: usize, now: Micros) -> Vec<Estimate> {
        let (current, previous) = self.minutes_at(now);
        let part = |summary: Option<&SpaceSaving>, key: &[u8]| {
            summary.map_or((0, 0), |summary| {
                summary
                    .get(key)
                    .unwrap_or_else(|| (summary.floor(), summary.floor()))
            })
        };
        let mut estimates: Vec<Estimate> = self
            .candidates(count, now)
            .into_iter()
            .map(|key| {
                let (now_count, now_error) = part(current, key);
                let (then_count, then_error) = part(previous, key);
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

/// How many of each minute's most refused keys `top(count)` weighs: twice the keys asked
/// for and a few more, so that a key ranked by its sum over the two minutes is among them
/// unless the minutes disagree widely.
pub fn candidates_per_minute(count: usize) -> usize {
    count.saturating_mul(2).saturating_add(8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// The order is by count, each slot knows its place, and each slot's group spans
    /// exactly the places of its count.
    fn sorted(summary: &SpaceSaving) -> bool {
        let counts: Vec<u64> = summary
            .order
            .iter()
            .map(|&held| summary.slots[held].count)
            .collect();
        let ordered = counts.windows(2).all(|pair| pair[0] <= pair[1]);
        let placed = summary
            .order
            .iter()
            .enumerate()
            .all(|(place, &held)| summary.slots[held].place == place);
        let grouped = summary.slots.iter().all(|slot| {
            let Group { first, last } = summary.groups[slot.group];
            (first..=last).contains(&slot.place)
                && counts[first..=last]
                    .iter()
                    .all(|&count| count == slot.count)
                && (first == 0 || counts[first - 1] < slot.count)
                && counts.get(last + 1).is_none_or(|&count| count > slot.count)
        });
        ordered && placed && grouped
    }

    #[test]
    fn a_stream_with_a_clear_order_is_exact_while_it_fits() {
        let mut top = TopKeys::new(4);
        let now = Micros::saturating(120 * MINUTE_US + 5);
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
        let minute = |m: i64| Micros::saturating(m * MINUTE_US);
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
    fn listing_a_few_weighs_a_few_of_a_hundred_thousand_kept_keys() {
        let now = Micros::saturating(60 * MINUTE_US);
        let mut top = TopKeys::new(MAX_CAPACITY);
        for key in 0..MAX_CAPACITY {
            top.record(format!("cold:{key}").as_bytes(), now);
        }
        for (key, times) in [(&b"hot"[..], 30), (b"warm", 20)] {
            for _ in 0..times {
                top.record(key, now);
            }
        }
        assert_eq!(top.current.index.len(), MAX_CAPACITY, "every slot kept");
        // The work is the candidates: each minute's 2 * count + 8 most refused.
        assert_eq!(top.candidates(10, now).len(), candidates_per_minute(10));
        // Each took the slot of a cold key refused once: an overcount of at most 1.
        let listed = top.top(2, now);
        let got: Vec<(&[u8], u64, u64)> = listed
            .iter()
            .map(|e| (&e.key[..], e.count, e.error))
            .collect();
        assert_eq!(got, [(&b"hot"[..], 31, 1), (b"warm", 21, 1)]);
        assert_eq!(top.top(10, now).len(), 10);
    }

    #[test]
    fn a_long_key_is_counted_under_its_first_bytes() {
        let mut summary = SpaceSaving::new(2);
        let long = vec![b'x'; MAX_KEY_LEN + 10];
        summary.record(&long);
        summary.record(&long[..MAX_KEY_LEN]);
        assert_eq!(summary.get(&long), Some((2, 0)));
    }

    /// Every key of both minutes, merged and sorted: what `top` gives when nothing bounds
    /// its candidates.
    fn merged_in_full(top: &TopKeys, now: Micros) -> Vec<Estimate> {
        let (current, previous) = top.minutes_at(now);
        let mut keys: Vec<&[u8]> = current
            .into_iter()
            .chain(previous)
            .flat_map(|summary| summary.most(usize::MAX))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let part = |summary: Option<&SpaceSaving>, key: &[u8]| {
            summary.map_or((0, 0), |s| s.get(key).unwrap_or((s.floor(), s.floor())))
        };
        let mut all: Vec<Estimate> = keys
            .into_iter()
            .map(|key| {
                let (a, ae) = part(current, key);
                let (b, be) = part(previous, key);
                Estimate {
                    key: key.to_vec(),
                    count: a + b,
                    error: ae + be,
                }
            })
            .collect();
        all.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        all
    }

    proptest! {
        /// While each minute keeps no more keys than the candidates of `count`, the bounded
        /// listing is the full merge's first `count`.
        #[test]
        fn a_bounded_listing_is_the_full_merge_while_the_candidates_cover_it(
            count in 0usize..6,
            first in prop::collection::vec(0u32..12, 0..80),
            second in prop::collection::vec(0u32..12, 0..80),
        ) {
            let mut top = TopKeys::new(candidates_per_minute(count));
            let minute = |m: i64| Micros::saturating(m * MINUTE_US);
            for key in first {
                top.record(format!("k{key}").as_bytes(), minute(3));
            }
            for key in second {
                top.record(format!("k{key}").as_bytes(), minute(4));
            }
            for at in [minute(4), minute(5), minute(7)] {
                let mut full = merged_in_full(&top, at);
                full.truncate(count);
                prop_assert_eq!(top.top(count, at), full);
            }
        }

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
                    top.record(&key, Micros::saturating(minute * MINUTE_US));
                    *exact.entry(key).or_default() += 1;
                }
            }
            for estimate in top.top(usize::MAX, Micros::saturating(8 * MINUTE_US)) {
                let truth = exact[&estimate.key];
                prop_assert!(estimate.count >= truth);
                prop_assert!(estimate.count - estimate.error <= truth);
            }
        }
    }
}
