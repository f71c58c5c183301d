use proptest::prelude::*;

use super::*;
use crate::core::time::Rounding;

const T0: Micros = Micros::saturating(1_700_000_000_000_000);

fn ms(millis: i64) -> Micros {
    Micros::saturating(millis * 1_000)
}

fn limiter(limit: i64, lease_ms: i64) -> LeaseLimiter {
    LeaseLimiter::new(limit, lease_ms, Unit::Milliseconds).unwrap()
}

/// One acquire as the command makes it: peeks and quantities that never fit only look.
fn acquire(
    limiter: &LeaseLimiter,
    set: &mut LeaseSet,
    now: Micros,
    quantity: u64,
) -> ([i64; 5], u64) {
    let acquired = if quantity == 0 || quantity > limiter.limit() {
        Acquired {
            verdict: limiter.inspect(Some(set), now, quantity),
            id: None,
        }
    } else {
        limiter.acquire(set, now, quantity, None)
    };
    (
        acquired.verdict.to_reply(Unit::Milliseconds, Rounding::Up),
        acquired.id.unwrap_or(0),
    )
}

#[test]
fn leases_hold_slots_until_released_or_ended() {
    let limiter = limiter(3, 1_000);
    let mut set = LeaseSet::default();
    let (reply, first) = acquire(&limiter, &mut set, T0, 2);
    assert_eq!(reply, [0, 3, 1, -1, 1_000]);
    assert_eq!(first, 1, "the model numbers its leases from 1");
    let (reply, second) = acquire(&limiter, &mut set, T0 + ms(100), 1);
    assert_eq!((reply, second), ([0, 3, 0, -1, 1_000], 2));
    // Full: retry when the first lease ends (2 slots free then), an upper bound.
    assert_eq!(
        acquire(&limiter, &mut set, T0 + ms(200), 2).0,
        [1, 3, 0, 800, 900]
    );
    assert_eq!(
        acquire(&limiter, &mut set, T0 + ms(200), 4).0,
        [1, 3, 0, -1, 900]
    );
    assert_eq!(
        acquire(&limiter, &mut set, T0 + ms(200), 0).0,
        [0, 3, 0, -1, 900]
    );
    // Released: its slots come back at once; a second release finds nothing.
    assert!(release(&mut set, T0 + ms(300), first));
    assert!(!release(&mut set, T0 + ms(300), first));
    assert_eq!(
        acquire(&limiter, &mut set, T0 + ms(300), 0).0,
        [0, 3, 2, -1, 800]
    );
    // The second lease ends at +1.1 s on its own.
    assert_eq!(
        acquire(&limiter, &mut set, T0 + ms(1_100), 0).0,
        [0, 3, 3, -1, 0]
    );
    assert!(!release(&mut set, T0 + ms(1_100), second), "ended");
    assert!(set.is_empty());
}

#[test]
fn a_renewed_lease_holds_on_and_moves_in_line() {
    let limiter = limiter(2, 1_000);
    let mut set = LeaseSet::default();
    let (_, a) = acquire(&limiter, &mut set, T0, 1);
    let (_, b) = acquire(&limiter, &mut set, T0 + ms(100), 1);
    assert!(renew(&mut set, T0 + ms(900), a, ms(1_000)));
    // b ends first now: at +1.1 s one slot frees.
    assert_eq!(
        acquire(&limiter, &mut set, T0 + ms(950), 1).0,
        [1, 2, 0, 150, 950]
    );
    assert_eq!(
        acquire(&limiter, &mut set, T0 + ms(1_100), 1).0,
        [0, 2, 0, -1, 1_000]
    );
    // a, renewed, still holds; an ended or unknown lease is not renewed.
    assert!(renew(&mut set, T0 + ms(1_800), a, ms(500)));
    assert!(!renew(&mut set, T0 + ms(1_800), b, ms(500)));
    assert!(!renew(&mut set, T0 + ms(1_800), 12_345, ms(500)));
    let ends: Vec<Micros> = set.leases().map(|lease| lease.ends).collect();
    assert_eq!(ends, [T0 + ms(2_100), T0 + ms(2_300)]);
}

#[test]
fn ids_are_drawn_from_their_seed_never_0_and_within_what_a_double_holds() {
    assert_eq!(draw_id(5), 5);
    assert_eq!(draw_id(u64::MAX), MAX_DRAWN_ID);
    assert_eq!(
        MAX_DRAWN_ID as f64 as u64, MAX_DRAWN_ID,
        "exact as a double"
    );
    // The id bits of a seed, alone: the bits above are not an id's.
    assert_eq!(draw_id((3 << 53) | 9), 9);
    // A seed whose id bits are 0 gives its other bits, and never 0.
    assert_eq!(draw_id(3 << 53), 3);
    assert_eq!(draw_id(0), 1);
    // What the server's generator gives, drawn 10,000 times: all different, none 0.
    let mut ids: Vec<u64> = (0..10_000)
        .map(|n| draw_id(crate::core::siphash::siphash24([1, 2], n)))
        .collect();
    assert!(ids.iter().all(|&id| (1..=MAX_DRAWN_ID).contains(&id)));
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 10_000);
}

#[test]
fn a_lease_keeps_the_id_it_was_taken_as() {
    let limiter = limiter(5, 10);
    let mut set = LeaseSet::default();
    for id in [MAX_ID, 77, 3] {
        limiter.hold(&mut set, T0, 1, id);
    }
    let mut ids: Vec<u64> = set.leases().map(|lease| lease.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [3, 77, MAX_ID]);
    assert!(release(&mut set, T0, 77));
    assert!(!release(&mut set, T0, 77), "released once");
}

#[test]
fn a_lease_is_16_bytes_and_one_lease_a_32_byte_allocation() {
    let limiter = limiter(65_536, 60_000);
    let mut set = LeaseSet::default();
    acquire(&limiter, &mut set, T0, 1);
    assert_eq!(set.allocated_bytes(), 32);
    for i in 1..10_000 {
        acquire(
            &limiter,
            &mut set,
            T0 + Micros::saturating(i),
            1 + (i as u64 % 3),
        );
    }
    assert_eq!(set.len(), 10_000);
    // 160,016 bytes in jemalloc's 160 KiB class: 16.4 bytes a lease.
    assert_eq!(set.allocated_bytes(), 163_840);
    let mut bytes = Vec::new();
    set.serialize(0, set.len(), &mut bytes);
    let mut copy = LeaseSet::default();
    copy.append_serialized(set.next_id(), &bytes[..LEASE_LEN * 7])
        .unwrap();
    copy.append_serialized(set.next_id(), &bytes[LEASE_LEN * 7..])
        .unwrap();
    assert!(copy.leases().eq(set.leases()));
    assert_eq!(copy.next_id(), set.next_id());
    assert_eq!(copy.held(), set.held());
    // Out of order, or not whole leases: refused.
    assert_eq!(copy.append_serialized(1, &bytes[..LEASE_LEN]), None);
    assert_eq!(LeaseSet::default().append_serialized(1, &bytes[..5]), None);
}

#[test]
fn refuses_parameters_it_cannot_honour() {
    assert_eq!(
        LeaseLimiter::new(0, 1, Unit::Seconds),
        Err(ParamError::NonPositiveLimit)
    );
    assert_eq!(
        LeaseLimiter::new(65_537, 1, Unit::Seconds),
        Err(ParamError::LimitTooHighForLeases)
    );
    assert_eq!(
        LeaseLimiter::new(1, 0, Unit::Seconds),
        Err(ParamError::NonPositiveLease)
    );
    assert_eq!(
        LeaseLimiter::new(1, i64::MAX, Unit::Seconds),
        Err(ParamError::LeaseTooLong)
    );
}

// --- Properties -------------------------------------------------------------------------

/// The leases kept the obvious way: every lease with its id, end and quantity.
#[derive(Default)]
struct Model {
    leases: Vec<Lease>,
}

impl Model {
    fn held(&self, now: Micros) -> u64 {
        self.leases
            .iter()
            .filter(|lease| lease.ends > now)
            .map(|lease| lease.quantity)
            .sum()
    }

    /// When enough leases end for `quantity` to fit.
    fn retry_at(&self, now: Micros, limit: u64, quantity: u64) -> Micros {
        let mut live: Vec<&Lease> = self.leases.iter().filter(|l| l.ends > now).collect();
        live.sort_by_key(|lease| lease.ends);
        let mut held = self.held(now);
        for lease in live {
            held -= lease.quantity;
            if held + quantity <= limit {
                return lease.ends;
            }
        }
        unreachable!()
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// A quantity, under a limit of its own: a changed limit applies to the leases held.
    Acquire(u64, u64),
    Release(usize),
    Renew(usize, i64),
}

fn ops() -> impl Strategy<Value = Vec<(i64, Op)>> {
    let op = prop_oneof![
        5 => (0u64..5, 1u64..8).prop_map(|(quantity, limit)| Op::Acquire(quantity, limit)),
        2 => any::<usize>().prop_map(Op::Release),
        2 => (any::<usize>(), 1i64..3_000).prop_map(|(i, lease)| Op::Renew(i, lease)),
    ];
    prop::collection::vec((0i64..600, op), 1..120)
}

proptest! {
    #[test]
    fn never_more_than_the_limit_held_and_every_reply_exact(
        lease in 1i64..2_000,
        history in ops(),
    ) {
        let mut set = LeaseSet::default();
        let mut model = Model::default();
        let mut issued: Vec<u64> = Vec::new();
        let mut now = T0;
        for (step, op) in history {
            now = now + Micros::saturating(step);
            match op {
                Op::Acquire(quantity, limit) => {
                    // What is held counts against the limit of each call, raised or lowered.
                    let limiter = LeaseLimiter::new(limit as i64, lease, Unit::Microseconds).unwrap();
                    let before = set.clone();
                    let held = model.held(now);
                    let dry = limiter.inspect(Some(&set), now, quantity);
                    let (reply, id) = acquire(&limiter, &mut set, now, quantity);
                    prop_assert_eq!(dry.to_reply(Unit::Milliseconds, Rounding::Up), reply);
                    let fits = quantity <= limit && held + quantity <= limit;
                    prop_assert_eq!(reply[0], i64::from(!fits));
                    prop_assert_eq!(reply[2], limit.saturating_sub(held + if fits { quantity } else { 0 }) as i64);
                    if quantity == 0 || quantity > limit {
                        prop_assert_eq!(&set, &before, "a peek or a quantity that never fits writes nothing");
                    }
                    if fits && quantity > 0 {
                        prop_assert!(id > 0 && issued.iter().all(|&old| old < id), "ids grow");
                        issued.push(id);
                        model.leases.push(Lease { ends: now + Micros::saturating(lease), id, quantity });
                    } else {
                        prop_assert_eq!(id, 0);
                    }
                    let retry = dry.retry_after;
                    if !fits && quantity <= limit {
                        let expected = model.retry_at(now, limit, quantity) - now;
                        prop_assert_eq!(retry, Some(expected.ticks()));
                    } else {
                        prop_assert_eq!(retry, None);
                    }
                    prop_assert!(!fits || model.held(now) <= limit);
                }
                Op::Release(pick) => {
                    let id = if issued.is_empty() { 1 } else { issued[pick % issued.len()] };
                    let held = model.leases.iter().any(|l| l.id == id && l.ends > now);
                    prop_assert_eq!(release(&mut set, now, id), held);
                    model.leases.retain(|l| l.id != id);
                }
                Op::Renew(pick, extension) => {
                    let id = if issued.is_empty() { 1 } else { issued[pick % issued.len()] };
                    let held = model.leases.iter().any(|l| l.id == id && l.ends > now);
                    prop_assert_eq!(renew(&mut set, now, id, Micros::saturating(extension)), held);
                    model.leases.retain(|l| l.id != id || l.ends > now);
                    for l in model.leases.iter_mut().filter(|l| l.id == id) {
                        l.ends = now + Micros::saturating(extension);
                    }
                }
            }
            prop_assert_eq!(set.live(now).0, model.held(now));
            let ends: Vec<Micros> = set.leases().map(|l| l.ends).collect();
            prop_assert!(ends.windows(2).all(|pair| pair[0] <= pair[1]), "kept in order");
            let limiter = LeaseLimiter::new(8, lease, Unit::Microseconds).unwrap();
            let reset = limiter.inspect(Some(&set), now, 0).reset_after;
            let last = model.leases.iter().map(|l| l.ends).filter(|&e| e > now).max();
            prop_assert_eq!(reset, last.map_or(Ticks::ZERO, |e| (e - now).ticks()));
        }
    }
}
