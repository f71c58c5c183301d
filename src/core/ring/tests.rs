use std::collections::VecDeque;

use proptest::prelude::*;

use super::*;

type LogRing = Ring<3, 1, 21>;
type LeaseRing = Ring<2, 2, 17>;

#[test]
fn size_classes_are_jemallocs() {
    let classes: Vec<usize> = [
        1, 16, 17, 24, 32, 33, 128, 129, 160, 161, 1_000, 80_000, 81_921,
    ]
    .into_iter()
    .map(size_class)
    .collect();
    assert_eq!(
        classes,
        [16, 16, 32, 32, 32, 48, 128, 160, 160, 192, 1_024, 81_920, 98_304]
    );
}

#[test]
fn a_one_entry_log_is_one_32_byte_allocation_and_so_is_a_one_lease_set() {
    let mut log = LogRing::with_capacity(0, 0);
    log.push_back([7]).unwrap();
    assert_eq!((log.capacity(), log.allocated_bytes()), (1, 32));
    let mut leases = LeaseRing::with_capacity(1, 0);
    leases.push_back([7, 8]).unwrap();
    assert_eq!((leases.capacity(), leases.allocated_bytes()), (1, 32));
}

#[test]
fn ten_thousand_entries_fill_one_80_kib_class() {
    let mut log = LogRing::with_capacity(0, 0);
    for entry in 0..10_000 {
        log.push_back([entry]).unwrap();
    }
    assert_eq!(log.allocated_bytes(), 81_920);
    assert_eq!(log.capacity(), 81_920 / 8 - 3);
    assert!(log.iter().map(|[entry]| entry).eq(0..10_000));
}

#[test]
fn header_kind_and_entries_survive_growth_handing_over_and_shrinking() {
    let mut ring = LeaseRing::with_capacity(2, 0);
    ring.set_header(1, 0xdead_beef);
    for i in 0..100 {
        ring.push_back([i, i * 2]).unwrap();
    }
    for _ in 0..95 {
        ring.pop_front();
    }
    ring.shrink_if_sparse();
    assert!(ring.capacity() < 100);
    let words = ring.into_words();
    assert_eq!(kind_of(words[0]), 2);
    assert_eq!(allocation_words::<2, 2, 17>(words[0]), words.len());
    let ring = LeaseRing::from_words(words);
    assert_eq!((ring.kind(), ring.header(1)), (2, 0xdead_beef));
    assert!(ring.iter().eq((95..100).map(|i| [i, i * 2])));
}

#[test]
fn a_ring_stops_at_its_maximum() {
    let max = LogRing::MAX_ENTRIES;
    let mut ring = LogRing::with_capacity(0, max);
    assert_eq!(ring.capacity(), max);
    for i in 0..max as u64 {
        ring.push_back([i]).unwrap();
    }
    assert_eq!(ring.push_back([0]), None);
    assert_eq!(ring.reserve(max + 1), None);
    assert_eq!(ring.len(), max);
    let max = LeaseRing::MAX_ENTRIES;
    assert_eq!(max, 1 << 16);
    let mut ring = LeaseRing::with_capacity(0, 0);
    for i in 0..max as u64 {
        ring.push_back_bounded([i, i], max).unwrap();
    }
    assert_eq!(ring.push_back([0, 0]), None);
    // Capped below its class, and still read back whole when handed over.
    let words = ring.into_words();
    assert_eq!(allocation_words::<2, 2, 17>(words[0]), words.len());
    let ring = LeaseRing::from_words(words);
    assert_eq!(ring.back(), Some([max as u64 - 1; 2]));
}

#[test]
fn the_owners_bits_of_word_0_survive_everything() {
    assert_eq!((LogRing::OWNER_BITS, LeaseRing::OWNER_BITS), (13, 21));
    let mut ring = LeaseRing::with_capacity(3, 0);
    ring.set_owner_bits((1 << 21) - 1);
    for i in 0..50 {
        ring.push_back([i, i]).unwrap();
    }
    while ring.len() > 2 {
        ring.pop_front();
    }
    ring.shrink_if_sparse();
    assert_eq!((ring.kind(), ring.owner_bits()), (3, (1 << 21) - 1));
    ring.set_owner_bits(5);
    assert_eq!((ring.kind(), ring.owner_bits(), ring.len()), (3, 5, 2));
}

/// One operation on a ring and on its model.
#[derive(Clone, Debug)]
enum Op {
    PushBack(u64),
    PopFront,
    PopBack,
    Insert(usize, u64),
    Remove(usize),
    Set(usize, u64),
    Reserve(usize),
    Shrink,
    RawRoundTrip,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u64>().prop_map(Op::PushBack),
        2 => Just(Op::PopFront),
        1 => Just(Op::PopBack),
        1 => (any::<usize>(), any::<u64>()).prop_map(|(i, v)| Op::Insert(i, v)),
        1 => any::<usize>().prop_map(Op::Remove),
        1 => (any::<usize>(), any::<u64>()).prop_map(|(i, v)| Op::Set(i, v)),
        1 => (0usize..300).prop_map(Op::Reserve),
        1 => Just(Op::Shrink),
        1 => Just(Op::RawRoundTrip),
    ]
}

proptest! {
    #[test]
    fn behaves_as_a_deque_and_always_fills_its_size_class(ops in prop::collection::vec(op(), 0..400)) {
        let mut ring = LeaseRing::with_capacity(1, 0);
        ring.set_header(1, 42);
        ring.set_owner_bits(77);
        let mut model: VecDeque<[u64; 2]> = VecDeque::new();
        for op in ops {
            match op {
                Op::PushBack(v) => {
                    ring.push_back([v, !v]).unwrap();
                    model.push_back([v, !v]);
                }
                Op::PopFront => prop_assert_eq!(ring.pop_front(), model.pop_front()),
                Op::PopBack => prop_assert_eq!(ring.pop_back(), model.pop_back()),
                Op::Insert(i, v) => {
                    let i = i % (model.len() + 1);
                    ring.insert(i, [v, 1]).unwrap();
                    model.insert(i, [v, 1]);
                }
                Op::Remove(i) if !model.is_empty() => {
                    let i = i % model.len();
                    prop_assert_eq!(Some(ring.remove(i)), model.remove(i));
                }
                Op::Set(i, v) if !model.is_empty() => {
                    let i = i % model.len();
                    ring.set(i, [v, v]);
                    model[i] = [v, v];
                }
                Op::Reserve(n) => {
                    ring.reserve(n).unwrap();
                    prop_assert!(ring.capacity() >= n);
                }
                Op::Shrink => ring.shrink_if_sparse(),
                Op::RawRoundTrip => {
                    let words = ring.into_words();
                    prop_assert_eq!(allocation_words::<2, 2, 17>(words[0]), words.len());
                    ring = LeaseRing::from_words(words);
                }
                Op::Remove(_) | Op::Set(..) => {}
            }
            prop_assert!(ring.iter().eq(model.iter().copied()));
            prop_assert_eq!(ring.len(), model.len());
            prop_assert_eq!(ring.front(), model.front().copied());
            prop_assert_eq!(ring.back(), model.back().copied());
            prop_assert!(ring.capacity() >= ring.len());
            prop_assert_eq!(size_class(ring.allocated_bytes()), ring.allocated_bytes());
            prop_assert_eq!((ring.kind(), ring.header(1), ring.owner_bits()), (1, 42, 77));
        }
    }
}
