//! A ring buffer of fixed-width entries with a few header words, all in one allocation: the
//! storage of the module's native values (`RL.LOG`'s log, `RL.ACQUIRE`'s leases).
//!
//! One allocation is what makes a small value cheap: Redis already spends an object and a
//! module-value wrapper on every key, so a log of one entry is one 32-byte allocation on top
//! (three header words and the entry), not a struct plus a separate buffer.
//!
//! Word 0 belongs to the ring: the kind of value (2 bits, set by its owner), the capacity
//! (21 bits), the index of the first entry (20 bits) and the number of entries (21 bits), so
//! a ring holds at most [`MAX_ENTRIES`]. Words `1..HEADER` are the owner's. The entries
//! follow, `WIDTH` words each.
//!
//! Capacities are chosen so that the allocation fills one of the allocator's size classes
//! exactly (jemalloc's: multiples of 16 bytes up to 128, then four classes per doubling), so
//! no byte of the class is wasted; a ring grows to the next class and shrinks when it falls
//! under a quarter full, which keeps every push O(1) amortised and the unused capacity under
//! a quarter of the whole.

/// The most entries a ring holds.
pub const MAX_ENTRIES: usize = 1 << 20;

const KIND_BITS: u32 = 2;
const CAPACITY_BITS: u32 = 21;
const HEAD_BITS: u32 = 20;
const LEN_BITS: u32 = 21;
const _: () = assert!(KIND_BITS + CAPACITY_BITS + HEAD_BITS + LEN_BITS == 64);

const CAPACITY_SHIFT: u32 = KIND_BITS;
const HEAD_SHIFT: u32 = CAPACITY_SHIFT + CAPACITY_BITS;
const LEN_SHIFT: u32 = HEAD_SHIFT + HEAD_BITS;

/// The allocator's size class for `bytes`: what an allocation of that size really takes.
pub fn size_class(bytes: usize) -> usize {
    if bytes <= 128 {
        return bytes.max(16).div_ceil(16) * 16;
    }
    // Four classes between consecutive powers of two: (2^k, 2^(k+1)] in steps of 2^(k-2).
    let k = usize::BITS - 1 - (bytes - 1).leading_zeros();
    let step = 1usize << (k - 2);
    bytes.div_ceil(step) * step
}

/// Entries of `WIDTH` words, after `HEADER` header words, in one allocation.
#[derive(Clone, PartialEq, Eq)]
pub struct Ring<const HEADER: usize, const WIDTH: usize> {
    /// The header, then `capacity * WIDTH` words of entries.
    words: Box<[u64]>,
}

impl<const HEADER: usize, const WIDTH: usize> std::fmt::Debug for Ring<HEADER, WIDTH> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("header", &&self.words[1..HEADER])
            .field("entries", &self.iter().collect::<Vec<_>>())
            .finish()
    }
}

impl<const HEADER: usize, const WIDTH: usize> Ring<HEADER, WIDTH> {
    /// An empty ring of the given kind, with room for `capacity` entries (rounded up to fill
    /// the size class).
    pub fn with_capacity(kind: u8, capacity: usize) -> Self {
        let capacity = Self::class_capacity(capacity);
        let mut words = vec![0; HEADER + capacity * WIDTH].into_boxed_slice();
        words[0] = u64::from(kind) & ((1 << KIND_BITS) - 1);
        let mut ring = Ring { words };
        ring.set_layout(capacity, 0, 0);
        ring
    }

    /// The capacity, at least `entries`, at which the allocation fills its size class.
    fn class_capacity(entries: usize) -> usize {
        let bytes = size_class((HEADER + entries * WIDTH) * 8);
        ((bytes / 8 - HEADER) / WIDTH).min(MAX_ENTRIES)
    }

    /// The kind its owner gave it.
    pub fn kind(&self) -> u8 {
        (self.words[0] & ((1 << KIND_BITS) - 1)) as u8
    }

    fn field(&self, shift: u32, bits: u32) -> usize {
        ((self.words[0] >> shift) & ((1 << bits) - 1)) as usize
    }

    /// Entries it can hold without growing.
    pub fn capacity(&self) -> usize {
        self.field(CAPACITY_SHIFT, CAPACITY_BITS)
    }

    fn head(&self) -> usize {
        self.field(HEAD_SHIFT, HEAD_BITS)
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.field(LEN_SHIFT, LEN_BITS)
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn set_layout(&mut self, capacity: usize, head: usize, len: usize) {
        debug_assert!(capacity <= MAX_ENTRIES && len <= capacity && (head < capacity || head == 0));
        self.words[0] = u64::from(self.kind())
            | (capacity as u64) << CAPACITY_SHIFT
            | (head as u64) << HEAD_SHIFT
            | (len as u64) << LEN_SHIFT;
    }

    /// Header word `index` (from 1; word 0 is the ring's).
    pub fn header(&self, index: usize) -> u64 {
        debug_assert!((1..HEADER).contains(&index));
        self.words[index]
    }

    /// Sets header word `index` (from 1).
    pub fn set_header(&mut self, index: usize, value: u64) {
        debug_assert!((1..HEADER).contains(&index));
        self.words[index] = value;
    }

    /// Where entry `index` (0 is the front) starts among the words.
    fn slot(&self, index: usize) -> usize {
        let capacity = self.capacity();
        let mut position = self.head() + index;
        if position >= capacity {
            position -= capacity;
        }
        HEADER + position * WIDTH
    }

    /// Entry `index`, counted from the front.
    pub fn get(&self, index: usize) -> [u64; WIDTH] {
        assert!(index < self.len(), "entry {index} of {}", self.len());
        let slot = self.slot(index);
        self.words[slot..slot + WIDTH]
            .try_into()
            .expect("WIDTH words")
    }

    /// Replaces entry `index`, counted from the front.
    pub fn set(&mut self, index: usize, entry: [u64; WIDTH]) {
        assert!(index < self.len(), "entry {index} of {}", self.len());
        let slot = self.slot(index);
        self.words[slot..slot + WIDTH].copy_from_slice(&entry);
    }

    /// The entries, front to back.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = [u64; WIDTH]> + '_ {
        (0..self.len()).map(|index| self.get(index))
    }

    /// The first entry.
    pub fn front(&self) -> Option<[u64; WIDTH]> {
        (!self.is_empty()).then(|| self.get(0))
    }

    /// The last entry.
    pub fn back(&self) -> Option<[u64; WIDTH]> {
        self.len().checked_sub(1).map(|last| self.get(last))
    }

    /// Appends an entry, growing to the next size class when full. `None` (and nothing
    /// changed) when the ring already holds [`MAX_ENTRIES`].
    pub fn push_back(&mut self, entry: [u64; WIDTH]) -> Option<()> {
        let len = self.len();
        if len == self.capacity() {
            self.grow_to(len + 1)?;
        }
        let (capacity, head) = (self.capacity(), self.head());
        self.set_layout(capacity, head, len + 1);
        self.set(len, entry);
        Some(())
    }

    /// Appends an entry as [`Ring::push_back`] does, but when full grows only up to `bound`
    /// entries (rounded up to fill the size class), for an owner that knows how many
    /// entries it can ever hold.
    pub fn push_back_bounded(&mut self, entry: [u64; WIDTH], bound: usize) -> Option<()> {
        let len = self.len();
        if len == self.capacity() {
            let next_class = self.next_class_capacity();
            self.relocate(Self::class_capacity(next_class.min(bound).max(len + 1)));
            if len == self.capacity() {
                return None;
            }
        }
        self.push_back(entry)
    }

    /// Removes and returns the first entry.
    pub fn pop_front(&mut self) -> Option<[u64; WIDTH]> {
        let entry = self.front()?;
        let (capacity, head, len) = (self.capacity(), self.head(), self.len());
        let head = if len == 1 || head + 1 == capacity {
            0
        } else {
            head + 1
        };
        self.set_layout(capacity, head, len - 1);
        Some(entry)
    }

    /// Removes and returns the last entry.
    pub fn pop_back(&mut self) -> Option<[u64; WIDTH]> {
        let entry = self.back()?;
        let (capacity, head, len) = (self.capacity(), self.head(), self.len());
        self.set_layout(capacity, if len == 1 { 0 } else { head }, len - 1);
        Some(entry)
    }

    /// Inserts an entry at `index`, shifting the later ones back: O(len - index). `None` when
    /// full at [`MAX_ENTRIES`].
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
    /// (and nothing changed) beyond [`MAX_ENTRIES`].
    pub fn reserve(&mut self, entries: usize) -> Option<()> {
        if entries <= self.capacity() {
            return Some(());
        }
        self.grow_to(entries)
    }

    fn grow_to(&mut self, entries: usize) -> Option<()> {
        if entries > MAX_ENTRIES {
            return None;
        }
        self.relocate(Self::class_capacity(
            entries.max(self.next_class_capacity()),
        ));
        Some(())
    }

    /// The capacity of the next size class up: each growth adds at least an eighth.
    fn next_class_capacity(&self) -> usize {
        (size_class(self.allocated_bytes() + 1) / 8 - HEADER).div_ceil(WIDTH)
    }

    /// Gives memory back when under a quarter full: down to twice the entries held (in a
    /// size class), so that the next pushes do not grow it straight away.
    pub fn shrink_if_sparse(&mut self) {
        let (capacity, len) = (self.capacity(), self.len());
        if capacity > 8 && len < capacity / 4 {
            let smaller = Self::class_capacity(len * 2);
            if smaller < capacity {
                self.relocate(smaller);
            }
        }
    }

    /// Moves the entries, front first, into an allocation for `capacity` entries.
    fn relocate(&mut self, capacity: usize) {
        let len = self.len();
        debug_assert!(capacity >= len);
        let mut words = Vec::with_capacity(HEADER + capacity * WIDTH);
        words.extend_from_slice(&self.words[..HEADER]);
        for index in 0..len {
            let slot = self.slot(index);
            words.extend_from_slice(&self.words[slot..slot + WIDTH]);
        }
        words.resize(HEADER + capacity * WIDTH, 0);
        self.words = words.into_boxed_slice();
        self.set_layout(capacity, 0, len);
    }

    /// Bytes of memory it holds: its one allocation.
    pub fn allocated_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Hands the allocation over as a thin pointer (what Redis keeps as the module value).
    pub fn into_raw(self) -> *mut u64 {
        Box::into_raw(self.words).cast::<u64>()
    }

    /// The total words of the allocation a raw pointer from [`Ring::into_raw`] points to.
    ///
    /// # Safety
    /// `raw` must come from `into_raw` of a ring with these `HEADER` and `WIDTH`.
    unsafe fn raw_words(raw: *const u64) -> usize {
        let capacity = ((unsafe { *raw } >> CAPACITY_SHIFT) & ((1 << CAPACITY_BITS) - 1)) as usize;
        HEADER + capacity * WIDTH
    }

    /// Takes back a ring handed over by [`Ring::into_raw`].
    ///
    /// # Safety
    /// `raw` must come from `into_raw` of a ring with these `HEADER` and `WIDTH`, not yet
    /// taken back.
    pub unsafe fn from_raw(raw: *mut u64) -> Self {
        let words = unsafe { Self::raw_words(raw) };
        Ring {
            words: unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(raw, words)) },
        }
    }
}

/// The kind of value a raw pointer from [`Ring::into_raw`] holds, whatever its layout.
///
/// # Safety
/// `raw` must come from `into_raw` of any ring.
pub unsafe fn raw_kind(raw: *const u64) -> u8 {
    (unsafe { *raw } & ((1 << KIND_BITS) - 1)) as u8
}

#[cfg(test)]
mod tests;
