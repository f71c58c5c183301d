//! Concurrency limits with leases (`RL.ACQUIRE`, `RL.RELEASE`, `RL.RENEW`): at most `limit`
//! slots held at once, each taken for a lease that ends on its own, so that a worker that
//! dies never keeps its slots.
//!
//! A key's leases are kept in one allocation ([`super::ring`]), ordered by when they end,
//! each 16 bytes: its end in microseconds (54 bits), its id (54 bits) and its quantity (20
//! bits). Leases that ended are dropped from the front as calls pass, O(1) amortised; the
//! slots held are kept as a sum. Ids are the master's: the first a key gives is the time in
//! microseconds, and each next one is one more, or the time if that is later, so ids only
//! grow within a key, and a key created anew after its leases ended gives ids its earlier
//! life never gave (that would take more than one acquire per microsecond).

use super::params::{self, ParamError, MAX_LEASE_LIMIT};
use super::ring::{self, Native, Ring};
use super::time::{Micros, Millis, Ticks, Unit};
use super::verdict::{RetryAfter, Verdict};

/// The kind tag of a lease set in the native type's storage.
pub const LEASE_KIND: u8 = 1;

/// Bytes of a lease in the serialized form.
pub const LEASE_LEN: usize = 16;

/// The storage: two header words (the ring's, whose spare bits hold the slots held; the
/// next id), then leases of two words, positions in 17 bits (up to 2^16 leases).
type LeaseRing = Ring<2, 2, 17>;

const _: () = assert!(MAX_LEASE_LIMIT as usize <= LeaseRing::MAX_ENTRIES);
const _: () = assert!(LeaseRing::OWNER_BITS >= 17, "the slots held fit in word 0");

/// Header word 1: the next id.
const NEXT_ID_WORD: usize = 1;

/// Bits of a lease's end, and of its id.
const TIME_BITS: u32 = 54;
/// Low bits of a word holding the quantity's part.
const QUANTITY_PART_BITS: u32 = 10;
const QUANTITY_PART_MASK: u64 = (1 << QUANTITY_PART_BITS) - 1;
/// The largest id a state or an effect may hold: 54 bits.
pub const MAX_ID: u64 = (1 << TIME_BITS) - 1;
/// The largest id drawn: 53 bits, the integers a double holds exactly. Clients in
/// JavaScript and Lua read an id as a number; a 54-bit id came back rounded, and its
/// release named no lease.
pub const MAX_DRAWN_ID: u64 = (1 << 53) - 1;

/// One lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// When it ends.
    pub ends: Micros,
    /// Its id.
    pub id: u64,
    /// The slots it holds.
    pub quantity: u64,
}

impl Lease {
    fn encode(self) -> [u64; 2] {
        let quantity = self.quantity - 1;
        [
            (self.ends.get() as u64) << QUANTITY_PART_BITS | quantity & QUANTITY_PART_MASK,
            self.id << QUANTITY_PART_BITS | quantity >> QUANTITY_PART_BITS,
        ]
    }

    fn decode([ends, id]: [u64; 2]) -> Lease {
        Lease {
            ends: Micros::saturating((ends >> QUANTITY_PART_BITS) as i64),
            id: id >> QUANTITY_PART_BITS,
            quantity: ((id & QUANTITY_PART_MASK) << QUANTITY_PART_BITS | ends & QUANTITY_PART_MASK)
                + 1,
        }
    }

    /// Whether it still holds its slots at `now`.
    fn holds_at(&self, now: Micros) -> bool {
        self.ends > now
    }
}

/// One key's leases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSet {
    ring: LeaseRing,
}

impl Default for LeaseSet {
    fn default() -> Self {
        LeaseSet {
            ring: LeaseRing::with_capacity(LEASE_KIND, 0),
        }
    }
}

impl Native for LeaseSet {
    const KIND: u8 = LEASE_KIND;

    fn into_words(self) -> Box<[u64]> {
        self.ring.into_words()
    }

    fn from_words(words: Box<[u64]>) -> Self {
        LeaseSet {
            ring: LeaseRing::from_words(words),
        }
    }

    fn allocation_words(first_word: u64) -> usize {
        ring::allocation_words::<2, 2, 17>(first_word)
    }
}

impl LeaseSet {
    /// Leases kept (some may have ended, until a call drops them).
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether it keeps no lease.
    #[cfg_attr(not(test), allow(dead_code))] // Beside `len`, as clippy asks.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// The slots its leases hold, ended ones included until dropped.
    fn held(&self) -> u64 {
        self.ring.owner_bits()
    }

    fn set_held(&mut self, held: u64) {
        self.ring.set_owner_bits(held);
    }

    /// The id the next lease gets, unless the clock is later.
    pub fn next_id(&self) -> u64 {
        self.ring.header(NEXT_ID_WORD)
    }

    fn set_next_id(&mut self, id: u64) {
        self.ring.set_header(NEXT_ID_WORD, id);
    }

    fn lease(&self, index: usize) -> Lease {
        Lease::decode(self.ring.get(index))
    }

    /// The leases, the first to end first.
    pub fn leases(&self) -> impl DoubleEndedIterator<Item = Lease> + '_ {
        self.ring.iter().map(Lease::decode)
    }

    /// Bytes of memory it holds: its one allocation.
    pub fn allocated_bytes(&self) -> usize {
        self.ring.allocated_bytes()
    }

    /// The leases from `first` on, [`LEASE_LEN`] little-endian bytes each, appended to `out`.
    pub fn serialize(&self, first: usize, count: usize, out: &mut Vec<u8>) {
        for index in first..first.saturating_add(count).min(self.len()) {
            for word in self.ring.get(index) {
                out.extend_from_slice(&word.to_le_bytes());
            }
        }
    }

    /// Appends serialized leases, and makes the next id at least `next_id`. `None` (and the
    /// set unchanged) when `bytes` is not a whole number of leases in order of their ends,
    /// or holds more than any limit allows.
    pub fn append_serialized(&mut self, next_id: u64, bytes: &[u8]) -> Option<()> {
        if bytes.len() % LEASE_LEN != 0 || next_id > MAX_ID {
            return None;
        }
        let decoded = bytes.chunks_exact(LEASE_LEN).map(|chunk| {
            let word = |i: usize| u64::from_le_bytes(chunk[i * 8..i * 8 + 8].try_into().unwrap());
            Lease::decode([word(0), word(1)])
        });
        let mut last = self
            .leases()
            .next_back()
            .map_or(Micros::saturating(i64::MIN), |lease| lease.ends);
        let mut held = self.held();
        for lease in decoded.clone() {
            if lease.ends < last || lease.quantity > MAX_LEASE_LIMIT {
                return None;
            }
            last = lease.ends;
            held = held
                .checked_add(lease.quantity)
                .filter(|&h| h <= MAX_LEASE_LIMIT)?;
        }
        self.ring.reserve(self.len() + bytes.len() / LEASE_LEN)?;
        for lease in decoded {
            self.ring.push_back(lease.encode())?;
        }
        self.set_held(held);
        self.set_next_id(self.next_id().max(next_id));
        Some(())
    }

    /// The slots held at `now`, and how many leases at the front have ended.
    fn live(&self, now: Micros) -> (u64, usize) {
        let mut held = self.held();
        let mut ended = 0;
        for lease in self.leases() {
            if lease.holds_at(now) {
                break;
            }
            held -= lease.quantity;
            ended += 1;
        }
        (held, ended)
    }

    /// Drops the leases that ended by `now`.
    fn drop_ended(&mut self, now: Micros) {
        let (held, ended) = self.live(now);
        for _ in 0..ended {
            self.ring.pop_front();
        }
        self.set_held(held);
        self.ring.shrink_if_sparse();
    }

    /// Adds `lease` in order of the ends (after any ending at the same time): at the back
    /// when leases share a duration, O(1). `None` when the ring is full, which a set no
    /// fuller than its limit never is: only a forged effect could ask it.
    fn insert(&mut self, lease: Lease) -> Option<()> {
        let position = (0..self.len())
            .rev()
            .find(|&index| self.lease(index).ends <= lease.ends)
            .map_or(0, |index| index + 1);
        self.ring.insert(position, lease.encode())?;
        self.set_held(self.held().saturating_add(lease.quantity));
        Some(())
    }

    /// Removes the lease `id`, if kept, and returns it.
    fn take(&mut self, id: u64) -> Option<Lease> {
        let index = (0..self.len()).find(|&index| self.lease(index).id == id)?;
        let lease = Lease::decode(self.ring.remove(index));
        self.set_held(self.held() - lease.quantity);
        Some(lease)
    }
}

/// A concurrency limit's parameters, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseLimiter {
    limit: u64,
    /// The lease, in microseconds.
    lease: i64,
}

/// What an acquire decided.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    /// The reply's five integers, before rounding.
    pub verdict: Verdict,
    /// The lease's id, when admitted.
    pub id: Option<u64>,
}

impl LeaseLimiter {
    /// Validates the parameters: at most `limit` slots held at once, for leases of `lease`
    /// `unit`s.
    pub fn new(limit: i64, lease: i64, unit: Unit) -> Result<LeaseLimiter, ParamError> {
        let limit = params::limit(limit)?;
        if limit > MAX_LEASE_LIMIT {
            return Err(ParamError::LimitTooHighForLeases);
        }
        Ok(LeaseLimiter {
            limit,
            lease: params::lease(lease, unit)?.get(),
        })
    }

    /// The most slots held at once.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The lease.
    pub fn lease(&self) -> Micros {
        Micros::saturating(self.lease)
    }

    /// Decides an acquire of `quantity` slots at `now` without changing anything: what a
    /// peek or a refusal replies, and what an admitted acquire will.
    pub fn inspect(&self, set: Option<&LeaseSet>, now: Micros, quantity: u64) -> Verdict {
        let (held, ended) = set.map_or((0, 0), |set| set.live(now));
        let admitted = quantity <= self.limit && held + quantity <= self.limit;
        let charged = if admitted { quantity } else { 0 };
        let last_end = set
            .and_then(|set| set.leases().next_back())
            .map(|lease| lease.ends)
            .filter(|&ends| ends > now);
        let last_end = if charged > 0 {
            Some(last_end.unwrap_or(now).max(now + self.lease()))
        } else {
            last_end
        };
        Verdict {
            limited: !admitted,
            limit: self.limit as i64,
            remaining: self.limit.saturating_sub(held + charged) as i64,
            retry_after: if !admitted && quantity <= self.limit {
                RetryAfter::of((self.retry_at(set, held, ended, quantity) - now).ticks())
            } else {
                RetryAfter::NONE
            },
            reset_after: last_end.map_or(Ticks::ZERO, |ends| (ends - now).ticks()),
        }
    }

    /// When enough leases will have ended for `quantity` (at most `limit`) to fit.
    fn retry_at(&self, set: Option<&LeaseSet>, held: u64, ended: usize, quantity: u64) -> Micros {
        let excess = held + quantity - self.limit;
        let mut freed = 0;
        for lease in set.into_iter().flat_map(LeaseSet::leases).skip(ended) {
            freed += lease.quantity;
            if freed >= excess {
                return lease.ends;
            }
        }
        unreachable!("the live leases hold `held` slots, at least the excess")
    }

    /// Acquires `quantity` slots (from 1 to `limit`) at `now` if they fit, as lease `id`
    /// when given, or else the next id; leases that ended are dropped then. A refusal
    /// changes nothing. What the engine does in two steps ([`LeaseLimiter::inspect`] to
    /// decide, [`LeaseLimiter::hold`] to commit), in one, for the model tests.
    #[cfg(test)]
    pub fn acquire(
        &self,
        set: &mut LeaseSet,
        now: Micros,
        quantity: u64,
        id: Option<u64>,
    ) -> Acquired {
        debug_assert!((1..=self.limit).contains(&quantity));
        let verdict = self.inspect(Some(set), now, quantity);
        if verdict.limited {
            return Acquired { verdict, id: None };
        }
        // The model tests number their leases from 1; the engine draws them at random.
        let id = id.unwrap_or_else(|| set.next_id().max(1));
        self.hold(set, now, quantity, id);
        Acquired {
            verdict,
            id: Some(id),
        }
    }

    /// Takes a lease of `quantity` slots at `now` as `id`, for an acquire already admitted
    /// (the master decided it; a copy applies what it decided): leases that ended are
    /// dropped, and the next id recorded is past this one. False, the lease not taken, only
    /// for a set already full of leases (a forged effect's).
    pub fn hold(&self, set: &mut LeaseSet, now: Micros, quantity: u64, id: u64) -> bool {
        set.drop_ended(now);
        let taken = set
            .insert(Lease {
                ends: now + self.lease(),
                id,
                quantity,
            })
            .is_some();
        if taken {
            set.set_next_id((id + 1).min(MAX_ID).max(set.next_id()));
        }
        taken
    }
}

/// Frees lease `id` at `now`: whether it was held (known, and not ended). Leases that
/// ended are dropped first.
pub fn release(set: &mut LeaseSet, now: Micros, id: u64) -> bool {
    let held = set.take(id).is_some_and(|lease| lease.holds_at(now));
    set.drop_ended(now);
    held
}

/// Extends lease `id` to `lease` from `now`: whether it was held (known, and not ended).
/// Leases that ended are dropped first.
pub fn renew(set: &mut LeaseSet, now: Micros, id: u64, lease: Micros) -> bool {
    let renewed = match set.take(id) {
        // Back where it was taken from: there is room.
        Some(held) if held.holds_at(now) => set
            .insert(Lease {
                ends: now.saturating_add(lease),
                ..held
            })
            .is_some(),
        _ => false,
    };
    set.drop_ended(now);
    renewed
}

/// The id a lease taken with `seed` (a value no client can predict, drawn by the master)
/// gets: one of the 2^53 - 1 ids from 1 ([`MAX_DRAWN_ID`]), at random. Ids are not a
/// sequence, so another holder's id cannot be guessed from one's own, and a key deleted and
/// made again, or a clock that stepped back, gives no id again as a time or a counter
/// would: two leases draw the same id with a chance of 2^-53, and a release names a lease
/// of the same key.
pub fn draw_id(seed: u64) -> u64 {
    // A seed whose id bits are all 0 takes its other bits instead: never id 0, which
    // means "no lease".
    let id = seed & MAX_DRAWN_ID;
    if id == 0 {
        (seed >> MAX_DRAWN_ID.count_ones()).max(1)
    } else {
        id
    }
}

/// When a key holding `set` should expire: when its last lease ends.
pub fn expire_at(set: &LeaseSet) -> Option<Millis> {
    set.leases()
        .next_back()
        .map(|lease| lease.ends.ceil_millis())
}

#[cfg(test)]
mod tests;
