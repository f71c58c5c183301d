//! A ring buffer of fixed-width entries with a few header words, all in one allocation: the
//! storage of the module's native values (`RL.LOG`'s log, `RL.ACQUIRE`'s leases).
//!
//! One allocation is what makes a small value cheap: Redis already spends an object and a
//! module-value wrapper on every key, so a log of one entry is one 32-byte allocation on top
//! (three header words and the entry), not a struct plus a separate buffer.
//!
//! Word 0 belongs to the ring: the kind of value (2 bits, set by its owner), the size class
//! of the allocation (7 bits, from which the capacity follows), the index of the first entry
//! and the number of entries (`INDEX_BITS` each, so a ring holds at most `2^(INDEX_BITS -
//! 1)` entries), and the owner's bits in what is left. Words `1..HEADER` are the owner's.
//! The entries follow, `WIDTH` words each.
//!
//! Capacities are chosen so that the allocation fills one of the allocator's size classes
//! exactly (jemalloc's: multiples of 16 bytes up to 128, then four classes per doubling), so
//! no byte of the class is wasted; a ring grows to the next class and shrinks when it falls
//! under a quarter full, which keeps every push O(1) amortised and the unused capacity under
//! a quarter of the whole.

const KIND_BITS: u32 = 2;
const CLASS_BITS: u32 = 7;
const CLASS_SHIFT: u32 = KIND_BITS;
const HEAD_SHIFT: u32 = CLASS_SHIFT + CLASS_BITS;

/// The allocator's size class for `bytes`: what an allocation of that size really takes.
#[cfg(test)]
pub fn size_class(bytes: usize) -> usize {
    class_bytes(class_index(bytes))
}

/// The index of the smallest size class of at least `bytes` (0 for 16 bytes).
fn class_index(bytes: usize) -> usize {
    if bytes <= 128 {
        return bytes.max(16).div_ceil(16) - 1;
    }
    // Four classes between consecutive powers of two: (2^k, 2^(k+1)] in steps of 2^(k-2).
    let k = (usize::BITS - 1 - (bytes - 1).leading_zeros()) as usize;
    let step = 1usize << (k - 2);
    let j = (bytes - (1 << k)).div_ceil(step);
    8 + (k - 7) * 4 + (j - 1)
}

/// The bytes of size class `index`.
const fn class_bytes(index: usize) -> usize {
    if index < 8 {
        return 16 * (index + 1);
    }
    let (k, j) = (7 + (index - 8) / 4, (index - 8) % 4 + 1);
    (1 << k) + j * (1 << (k - 2))
}

/// The number of size classes word 0 can name.
const CLASSES: usize = 1 << CLASS_BITS;

/// Entries of `WIDTH` words, after `HEADER` header words, in one allocation; positions are
/// counted in `INDEX_BITS` bits.
#[derive(Clone, PartialEq, Eq)]
pub struct Ring<const HEADER: usize, const WIDTH: usize, const INDEX_BITS: u32> {
    /// The header, then `capacity * WIDTH` words of entries.
    words: Box<[u64]>,
}

impl<const HEADER: usize, const WIDTH: usize, const INDEX_BITS: u32> std::fmt::Debug
    for Ring<HEADER, WIDTH, INDEX_BITS>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("owner_bits", &self.owner_bits())
            .field("header", &&self.words[1..HEADER])
            .field("entries", &self.iter().collect::<Vec<_>>())
            .finish()
    }
}

impl<const HEADER: usize, const WIDTH: usize, const INDEX_BITS: u32>
    Ring<HEADER, WIDTH, INDEX_BITS>
{
    /// The most entries a ring holds.
    pub const MAX_ENTRIES: usize = 1 << (INDEX_BITS - 1);
    const LEN_SHIFT: u32 = HEAD_SHIFT + INDEX_BITS;
    const OWNER_SHIFT: u32 = Self::LEN_SHIFT + INDEX_BITS;
    /// Bits of word 0 left to the owner.
    pub const OWNER_BITS: u32 = 64 - Self::OWNER_SHIFT;

    /// An empty ring of the given kind, with room for `capacity` entries (rounded up to fill
    /// the size class).
    pub fn with_capacity(kind: u8, capacity: usize) -> Self {
        let class = Self::class_for(capacity);
        let words = vec![0; Self::words_of_class(class)].into_boxed_slice();
        let mut ring = Ring { words };
        ring.words[0] = u64::from(kind) & ((1 << KIND_BITS) - 1);
        ring.set_layout(class, 0, 0);
        ring
    }

    /// The size class that holds at least `entries` (up to the maximum).
    fn class_for(entries: usize) -> usize {
        class_index((HEADER + entries.min(Self::MAX_ENTRIES) * WIDTH) * 8)
    }

    /// The entries an allocation of size class `class` holds.
    const fn capacity_of_class(class: usize) -> usize {
        // Classes too small for the header are never used.
        let capacity = (class_bytes(class) / 8).saturating_sub(HEADER) / WIDTH;
        if capacity < Self::MAX_ENTRIES {
            capacity
        } else {
            Self::MAX_ENTRIES
        }
    }

    /// The words of an allocation of size class `class`: the whole class, but no more than
    /// the most entries a ring holds need.
    #[inline(always)]
    fn words_of_class(class: usize) -> usize {
        Self::WORDS_OF_CLASS[class] as usize
    }

    /// [`Ring::words_of_class`] for every class, computed once: taking a ring back from its
    /// thin pointer (every call on a native value) then reads a table instead of
    /// recomputing a size class.
    const WORDS_OF_CLASS: [u32; CLASSES] = {
        let mut words = [0; CLASSES];
        let mut class = 0;
        while class < CLASSES {
            words[class] = (HEADER + Self::capacity_of_class(class) * WIDTH) as u32;
            class += 1;
        }
        words
    };

    /// The kind its owner gave it.
    pub fn kind(&self) -> u8 {
        (self.words[0] & ((1 << KIND_BITS) - 1)) as u8
    }

    #[inline(always)]
    fn field(&self, shift: u32, bits: u32) -> usize {
        ((self.words[0] >> shift) & ((1 << bits) - 1)) as usize
    }

    #[inline(always)]
    fn class(&self) -> usize {
        self.field(CLASS_SHIFT, CLASS_BITS)
    }

    /// Entries it can hold without growing: what its allocation holds after the header.
    #[inline(always)]
    pub fn capacity(&self) -> usize {
        (self.words.len() - HEADER) / WIDTH
    }

    #[inline(always)]
    fn head(&self) -> usize {
        self.field(HEAD_SHIFT, INDEX_BITS)
    }

    /// The index of the first entry and the number of entries, from one read of word 0.
    #[inline(always)]
    fn head_and_len(&self) -> (usize, usize) {
        let word = self.words[0];
        let mask = (1 << INDEX_BITS) - 1;
        (
            (word >> HEAD_SHIFT) as usize & mask,
            (word >> Self::LEN_SHIFT) as usize & mask,
        )
    }

    /// Where the entry at `position` (counted from the head, below twice the capacity)
    /// starts among the words.
    #[inline(always)]
    fn wrapped(&self, mut position: usize) -> usize {
        let capacity = self.capacity();
        if position >= capacity {
            position -= capacity;
        }
        HEADER + position * WIDTH
    }

    /// Entries held.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.field(Self::LEN_SHIFT, INDEX_BITS)
    }

    /// Whether it holds no entry.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The owner's bits of word 0.
    #[inline(always)]
    pub fn owner_bits(&self) -> u64 {
        if Self::OWNER_BITS == 0 {
            0
        } else {
            self.words[0] >> Self::OWNER_SHIFT
        }
    }

    /// Sets the owner's bits of word 0 (what does not fit in [`Ring::OWNER_BITS`] is lost).
    pub fn set_owner_bits(&mut self, bits: u64) {
        if Self::OWNER_BITS > 0 {
            self.words[0] = self.words[0] & !Self::OWNER_MASK | bits << Self::OWNER_SHIFT;
        }
    }

    /// The bits of word 0 that are the owner's.
    const OWNER_MASK: u64 = if Self::OWNER_BITS == 0 {
        0
    } else {
        !((1u64 << Self::OWNER_SHIFT) - 1)
    };

    #[inline(always)]
    fn set_layout(&mut self, class: usize, head: usize, len: usize) {
        debug_assert!(len <= Self::capacity_of_class(class));
        debug_assert!(head < Self::capacity_of_class(class) || head == 0);
        self.words[0] = u64::from(self.kind())
            | self.words[0] & Self::OWNER_MASK
            | (class as u64) << CLASS_SHIFT
            | (head as u64) << HEAD_SHIFT
            | (len as u64) << Self::LEN_SHIFT;
    }

    /// Sets the index of the first entry and the number of entries, in the same
    /// allocation.
    #[inline(always)]
    fn set_head_and_len(&mut self, head: usize, len: usize) {
        debug_assert!(len <= self.capacity() && (head < self.capacity() || head == 0));
        let mask = (1 << INDEX_BITS) - 1;
        let fields = mask << HEAD_SHIFT | mask << Self::LEN_SHIFT;
        self.words[0] =
            self.words[0] & !fields | (head as u64) << HEAD_SHIFT | (len as u64) << Self::LEN_SHIFT;
    }

    /// Header word `index` (from 1; word 0 is the ring's).
    #[inline(always)]
    pub fn header(&self, index: usize) -> u64 {
        debug_assert!((1..HEADER).contains(&index));
        self.words[index]
    }

    /// Sets header word `index` (from 1).
    #[inline(always)]
    pub fn set_header(&mut self, index: usize, value: u64) {
        debug_assert!((1..HEADER).contains(&index));
        self.words[index] = value;
    }

    /// Where entry `index` (0 is the front) starts among the words; panics for an index
    /// beyond the entries held.
    #[inline(always)]
    fn slot(&self, index: usize) -> usize {
        let (head, len) = self.head_and_len();
        assert!(index < len, "entry {index} of {len}");
        self.wrapped(head + index)
    }

    /// Entry `index`, counted from the front.
    #[inline(always)]
    pub fn get(&self, index: usize) -> [u64; WIDTH] {
        let slot = self.slot(index);
        let mut entry = [0; WIDTH];
        entry.copy_from_slice(&self.words[slot..slot + WIDTH]);
        entry
    }

    /// Replaces entry `index`, counted from the front.
    #[inline(always)]
    pub fn set(&mut self, index: usize, entry: [u64; WIDTH]) {
        let slot = self.slot(index);
        self.words[slot..slot + WIDTH].copy_from_slice(&entry);
    }

    /// The entries, front to back.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = [u64; WIDTH]> + '_ {
        // The two runs of the ring: from the head to the end of the storage, then from its
        // start.
        let (head, len) = self.head_and_len();
        let first_run = len.min(self.capacity() - head);
        let entries = &self.words[HEADER..];
        let runs = entries[head * WIDTH..(head + first_run) * WIDTH]
            .chunks_exact(WIDTH)
            .chain(entries[..(len - first_run) * WIDTH].chunks_exact(WIDTH));
        runs.map(|words| {
            let mut entry = [0; WIDTH];
            entry.copy_from_slice(words);
            entry
        })
    }

    /// The first entry.
    #[inline(always)]
    pub fn front(&self) -> Option<[u64; WIDTH]> {
        (!self.is_empty()).then(|| self.get(0))
    }

    /// The last entry.
    #[inline(always)]
    pub fn back(&self) -> Option<[u64; WIDTH]> {
        self.back_slot().map(|slot| {
            let mut entry = [0; WIDTH];
            entry.copy_from_slice(&self.words[slot..slot + WIDTH]);
            entry
        })
    }

    /// The last entry, to change in place.
    #[inline(always)]
    pub fn back_mut(&mut self) -> Option<&mut [u64]> {
        self.back_slot()
            .map(|slot| &mut self.words[slot..slot + WIDTH])
    }

    /// Where the last entry starts among the words.
    #[inline(always)]
    fn back_slot(&self) -> Option<usize> {
        let (head, len) = self.head_and_len();
        (len > 0).then(|| self.wrapped(head + len - 1))
    }

    /// Appends an entry, growing to the next size class when full. `None` (and nothing
    /// changed) when the ring already holds [`Ring::MAX_ENTRIES`].
    #[inline(always)]
    pub fn push_back(&mut self, entry: [u64; WIDTH]) -> Option<()> {
        let (head, len) = self.head_and_len();
        if len == self.capacity() {
            return self.grow_and_push_back(entry);
        }
        // Not full: the length field goes up by one, nothing else in word 0 moves.
        self.words[0] += 1 << Self::LEN_SHIFT;
        let slot = self.wrapped(head + len);
        self.words[slot..slot + WIDTH].copy_from_slice(&entry);
        Some(())
    }

    /// [`Ring::push_back`] on a full ring.
    #[cold]
    fn grow_and_push_back(&mut self, entry: [u64; WIDTH]) -> Option<()> {
        self.grow_to(self.len() + 1)?;
        self.push_back(entry)
    }

    /// Appends an entry as [`Ring::push_back`] does, but when full grows only up to `bound`
    /// entries (rounded up to fill the size class), for an owner that knows how many
    /// entries it can ever hold.
    pub fn push_back_bounded(&mut self, entry: [u64; WIDTH], bound: usize) -> Option<()> {
        let len = self.len();
        if len == self.capacity() {
            let class = (self.class() + 1).min(Self::class_for(bound.max(len + 1)));
            self.relocate(class);
            if len == self.capacity() {
                return None;
            }
        }
        self.push_back(entry)
    }

    /// Removes and returns the first entry.
    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<[u64; WIDTH]> {
        let entry = self.front()?;
        let (head, len) = self.head_and_len();
        let head = if len == 1 || head + 1 == self.capacity() {
            0
        } else {
            head + 1
        };
        self.set_head_and_len(head, len - 1);
        Some(entry)
    }

    /// Removes and returns the last entry.
    pub fn pop_back(&mut self) -> Option<[u64; WIDTH]> {
        let entry = self.back()?;
        let (head, len) = self.head_and_len();
        self.set_head_and_len(if len == 1 { 0 } else { head }, len - 1);
        Some(entry)
    }

    /// Inserts an entry at `index`, shifting the later ones back: O(len - index). `None` when
    /// full at [`Ring::MAX_ENTRIES`].
    pub fn insert(&mut self, index: usize, entry: [u64; WIDTH]) -> Option<()> {
        assert!(index <= self.len());
        self.push_back(entry)?;
        for position in (index..self.len() - 1).rev() {
            let moved = self.get(position);
            self.set(position + 1, moved);
        }
        self.set(index, entry);
        Some(())
    }

    /// Removes the entry at `index`, shifting the later ones forward: O(len - index).
    pub fn remove(&mut self, index: usize) -> [u64; WIDTH] {
        let removed = self.get(index);
        for position in index + 1..self.len() {
            let moved = self.get(position);
            self.set(position - 1, moved);
        }
        self.pop_back();
        removed
    }

    /// Makes room for at least `entries` entries: the next size class up, or more. `None`
    /// (and nothing changed) beyond [`Ring::MAX_ENTRIES`].
    pub fn reserve(&mut self, entries: usize) -> Option<()> {
        if entries <= self.capacity() {
            return Some(());
        }
        self.grow_to(entries)
    }

    /// Grows to the class that holds `entries`, and at least to the next class up, so that
    /// each growth adds an eighth or more.
    fn grow_to(&mut self, entries: usize) -> Option<()> {
        if entries > Self::MAX_ENTRIES {
            return None;
        }
        self.relocate(Self::class_for(entries).max(self.class() + 1));
        Some(())
    }

    /// Gives memory back when under a quarter full: down to twice the entries held (in a
    /// size class), so that the next pushes do not grow it straight away.
    pub fn shrink_if_sparse(&mut self) {
        let (capacity, len) = (self.capacity(), self.len());
        if capacity > 8 && len < capacity / 4 {
            let smaller = Self::class_for(len * 2);
            if smaller < self.class() {
                self.relocate(smaller);
            }
        }
    }

    /// Moves the entries, front first, into an allocation of size class `class`: the two
    /// runs of the ring (from the head to the end of the storage, then from its start), each
    /// copied at once.
    fn relocate(&mut self, class: usize) {
        let len = self.len();
        let words_needed = Self::words_of_class(class);
        debug_assert!(Self::capacity_of_class(class) >= len);
        let (head, capacity) = (self.head(), self.capacity());
        let first_run = len.min(capacity - head);
        let mut words = Vec::with_capacity(words_needed);
        words.extend_from_slice(&self.words[..HEADER]);
        let entries = &self.words[HEADER..];
        words.extend_from_slice(&entries[head * WIDTH..(head + first_run) * WIDTH]);
        words.extend_from_slice(&entries[..(len - first_run) * WIDTH]);
        words.resize(words_needed, 0);
        self.words = words.into_boxed_slice();
        self.set_layout(class, 0, len);
    }

    /// Bytes of memory it holds: its one allocation.
    pub fn allocated_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Hands the allocation over: what the server keeps as the key's value (the FFI layer
    /// turns it into a thin pointer, and back with [`allocation_words`]).
    pub fn into_words(self) -> Box<[u64]> {
        self.words
    }

    /// Takes back an allocation handed over by [`Ring::into_words`].
    pub fn from_words(words: Box<[u64]>) -> Self {
        debug_assert_eq!(words.len(), Self::words_of_class(class_of(words[0])));
        Ring { words }
    }
}

/// A value the server keeps in the module's native type: one ring, whose word 0 says which
/// kind it is. The FFI layer hands it to the server as a thin pointer to its words and takes
/// it back from one.
pub trait Native: Sized {
    /// The kind in word 0.
    const KIND: u8;
    /// Hands the allocation over.
    fn into_words(self) -> Box<[u64]>;
    /// Takes back an allocation handed over by [`Native::into_words`].
    fn from_words(words: Box<[u64]>) -> Self;
    /// The words of the allocation whose word 0 is `first_word`.
    fn allocation_words(first_word: u64) -> usize;
}

/// The size class word 0 names.
fn class_of(first_word: u64) -> usize {
    ((first_word >> CLASS_SHIFT) & ((1 << CLASS_BITS) - 1)) as usize
}

/// The words of the allocation of a ring of this layout whose word 0 is `first_word`: what
/// gives a thin pointer to it its length back.
pub fn allocation_words<const HEADER: usize, const WIDTH: usize, const INDEX_BITS: u32>(
    first_word: u64,
) -> usize {
    Ring::<HEADER, WIDTH, INDEX_BITS>::words_of_class(class_of(first_word))
}

/// The kind of value a ring whose word 0 is `first_word` holds, whatever its layout.
pub fn kind_of(first_word: u64) -> u8 {
    (first_word & ((1 << KIND_BITS) - 1)) as u8
}

#[cfg(test)]
mod tests;
