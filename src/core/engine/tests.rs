//! All or nothing, over random mixes of limiters and clocks: a call over several keys is
//! run by the engine on an in-memory store, and checked against what each limiter alone
//! would do.

use proptest::prelude::*;

use super::memory::{Entry, Memory, Sent};
use super::*;
use crate::core::all_or_none::combined;
use crate::core::gcra::Gcra;
use crate::core::lease::LeaseLimiter;
use crate::core::log::LogLimiter;
use crate::core::testing::*;
use crate::core::time::{Rounding, Unit};
use crate::core::windows::{Algorithm, WindowLimiter};

const NAMES: [&str; 4] = ["k0", "k1", "k2", "k3"];

/// Limiters on keys of one store, `k0` and on.
#[derive(Clone)]
struct Keys {
    limiters: Vec<Limiter>,
    memory: Memory,
}

impl Keys {
    fn new(limiters: Vec<Limiter>) -> Keys {
        assert!(limiters.len() <= NAMES.len());
        Keys {
            limiters,
            memory: Memory::new(),
        }
    }

    fn run(
        &self,
        first: usize,
        limiters: &[Limiter],
        now: Micros,
        request: Request,
        write: bool,
    ) -> Vec<Verdict> {
        let call = Call {
            limiters,
            request,
            now,
            write,
            seed: now.get() as u64,
        };
        let names = &NAMES[first..first + limiters.len()];
        self.memory.run(names, &call).unwrap()
    }

    /// A call over every key, as RL.ALL makes it: each key's reply and the combined one.
    fn call_all(&mut self, now: Micros, request: Request) -> (Vec<Verdict>, Verdict) {
        let verdicts = self.run(0, &self.limiters.clone(), now, request, true);
        let all = combined(&verdicts);
        (verdicts, all)
    }

    /// A call of key `index` alone.
    fn call(&mut self, index: usize, now: Micros, request: Request) -> Verdict {
        let limiter = self.limiters[index];
        self.run(index, &[limiter], now, request, true)[0]
    }

    /// A dry run of key `index` alone.
    fn dry(&self, index: usize, now: Micros, request: Request) -> Verdict {
        self.run(index, &[self.limiters[index]], now, request, false)[0]
    }

    fn stored(&self, index: usize) -> Option<Entry> {
        self.memory.snapshot().remove(NAMES[index])
    }

    fn live(&self, index: usize, now: Micros) -> Option<Entry> {
        self.memory.get(NAMES[index], now)
    }
}

/// Whether `request` on key `index` alone would start a block: refused for lack of room,
/// with `BLOCK`, on a key not blocked already.
fn starts_block(keys: &Keys, index: usize, now: Micros, request: &Request) -> bool {
    let mut alone = keys.clone();
    let before = alone.live(index, now);
    let verdict = alone.call(index, now, *request);
    verdict.limited && alone.stored(index) != before && request.action == Action::Take
}

fn limiter(kind: u8, limit: u64, window_ms: i64) -> Limiter {
    let limit = limit as i64;
    match kind {
        0 => Limiter::Throttle(Gcra::new(limit - 1, limit, window_ms, Unit::Milliseconds).unwrap()),
        1..=3 => {
            let algorithm = match kind {
                1 => Algorithm::Fixed,
                2 => Algorithm::Sliding,
                _ => Algorithm::Buckets(5),
            };
            Limiter::Window(
                WindowLimiter::new(limit, window_ms, Unit::Milliseconds, algorithm).unwrap(),
            )
        }
        4 => Limiter::Log(LogLimiter::new(limit, window_ms, Unit::Milliseconds).unwrap()),
        6 => Limiter::Window(
            WindowLimiter::new(limit, window_ms, Unit::Milliseconds, Algorithm::Anchored).unwrap(),
        ),
        _ => Limiter::Lease(LeaseLimiter::new(limit, window_ms, Unit::Milliseconds).unwrap()),
    }
}

#[test]
fn per_second_and_per_minute_together() {
    // 3 per second and 5 per minute, exactly: the second limit binds after 5.
    let mut keys = Keys::new(vec![limiter(4, 3, 1_000), limiter(4, 5, 60_000)]);
    let reply = |(_, all): (Vec<Verdict>, Verdict)| all.to_reply(Unit::Milliseconds, Rounding::Up);
    assert_eq!(reply(keys.call_all(T0, take(1))), [0, 3, 2, -1, 60_000]);
    assert_eq!(reply(keys.call_all(T0, take(2))), [0, 3, 0, -1, 60_000]);
    // The per-second limit refuses: nothing is charged to the per-minute one.
    assert_eq!(reply(keys.call_all(T0, take(1))), [1, 3, 0, 1_000, 60_000]);
    assert_eq!(keys.dry(1, T0, take(0)).remaining, 2);
    assert_eq!(
        reply(keys.call_all(T0 + ms(1_000), take(2))),
        [0, 5, 0, -1, 60_000]
    );
    // Now the per-minute one binds: retry when its first entries leave.
    let (verdicts, all) = keys.call_all(T0 + ms(2_000), take(1));
    assert_eq!(
        all.to_reply(Unit::Milliseconds, Rounding::Up),
        [1, 5, 0, 58_000, 59_000]
    );
    // The per-second limiter would admit: it replies its standing, uncharged.
    assert_eq!(
        verdicts[0].to_reply(Unit::Milliseconds, Rounding::Up),
        [0, 3, 3, -1, 0]
    );
}

#[test]
fn a_quantity_one_limiter_can_never_fit_is_refused_for_good_and_blocks_nothing() {
    let mut keys = Keys::new(vec![limiter(1, 2, 1_000), limiter(0, 10, 1_000)]);
    keys.call_all(T0, take(2));
    let before = keys.memory.snapshot();
    let (_, all) = keys.call_all(T0, blocking(5, 10_000));
    assert_eq!(
        all.to_reply(Unit::Milliseconds, Rounding::Up)[..4],
        [1, 2, 0, -1]
    );
    assert_eq!(keys.memory.snapshot(), before);
}

#[test]
fn a_key_of_another_kind_anywhere_stops_the_call_before_any_write() {
    let mut keys = Keys::new(vec![limiter(0, 5, 1_000), limiter(4, 5, 1_000)]);
    keys.call(0, T0, take(1));
    let before = keys.memory.snapshot();
    // The throttle on k1 (new, and would be written), the log on k0 (a throttle's string).
    let call = Call {
        limiters: &keys.limiters,
        request: take(1),
        now: T0,
        write: true,
        seed: 0x5EED,
    };
    assert_eq!(
        keys.memory.run(&["k1", "k0"], &call),
        Err(crate::core::windows::StateError::Foreign)
    );
    assert_eq!(keys.memory.snapshot(), before);
}

#[test]
fn a_logs_change_travels_as_the_change_the_master_decided() {
    let mut keys = Keys::new(vec![limiter(4, 3, 1_000)]);
    keys.call(0, T0, take(2));
    keys.call(0, T0 + ms(1), refund(1));
    keys.call(0, T0 + ms(2), take(2));
    // Refused without a block: nothing changes, nothing travels.
    keys.call(0, T0 + ms(3), take(1));
    keys.call(0, T0 + ms(4), blocking(1, 500));
    // What fits of 3, and a penalty block if nothing did: one field each (the block
    // started from none, so all 3 fit once it ended).
    keys.call(0, T0 + ms(1_001), at_most_blocking(3, 500));
    let sent: Vec<String> = keys.memory.sent().iter().map(|sent| sent.text()).collect();
    assert_eq!(
        sent,
        [
            "RL.LOG.APPLY 3,1000000,1700000000000000,TAKE,2",
            "RL.LOG.APPLY 3,1000000,1700000000001000,REFUND,1",
            "RL.LOG.APPLY 3,1000000,1700000000002000,TAKE,2",
            "RL.LOG.APPLY 3,1000000,1700000000004000,BLOCK,1700000000504000",
            // The key expired with its block (nothing else counted), as the server deletes it.
            "DEL",
            "RL.LOG.APPLY 3,1000000,1700000001001000,TAKE,3",
        ]
    );
    // The replica that applied them holds the same log and expiry (the store checks it
    // after every call; here once more, by hand).
    assert_eq!(keys.memory.snapshot().len(), 1);
}

/// The reported defect: `AT_MOST` with `BLOCK` on a log, whose effect carried one of them.
#[test]
fn a_partial_take_with_a_block_reaches_the_replica_whole() {
    let mut keys = Keys::new(vec![limiter(4, 5, 60_000)]);
    keys.call(0, T0, take(4));
    let (verdicts, _) = keys.call_all(T0 + ms(1), at_most_blocking(3, 10_000));
    assert!(!verdicts[0].limited);
    assert_eq!(
        keys.memory.sent().last().map(Sent::text).as_deref(),
        Some("RL.LOG.APPLY 5,60000000,1700000000001000,TAKE,1")
    );
}

/// A log in RL.ALL with `AT_MOST`, where another limiter binds: the log is charged what the
/// call granted, not what it alone would have.
#[test]
fn a_log_in_a_partial_call_is_charged_what_the_call_granted() {
    let mut keys = Keys::new(vec![limiter(1, 2, 60_000), limiter(4, 10, 60_000)]);
    let request = Request {
        shortfall: Shortfall::AtMost,
        ..take(5)
    };
    keys.call_all(T0, request);
    let sent: Vec<String> = keys.memory.sent().iter().map(Sent::text).collect();
    assert_eq!(sent[1], "RL.LOG.APPLY 10,60000000,1700000000000000,TAKE,2");
}

/// A mix of 1 to 4 limiters (algorithm, limit 2 to 8, window 200 ms to 2 s).
fn mixes() -> impl Strategy<Value = Vec<(u8, u64, i64)>> {
    prop::collection::vec((0u8..5, 2u64..9, 200i64..2_000), 1..5)
}

fn requests() -> impl Strategy<Value = Vec<(i64, i64, Request)>> {
    let request = prop_oneof![
        5 => (0u64..6).prop_map(take),
        2 => (1u64..6, 1i64..2_000).prop_map(|(q, block)| blocking(q, block)),
        2 => (0u64..6).prop_map(refund),
        1 => (9u64..12).prop_map(take),
    ];
    // (ms forward, ms back now and then, request)
    prop::collection::vec(
        (
            0i64..400,
            prop_oneof![9 => Just(0i64), 1 => 0i64..500],
            request,
        ),
        1..60,
    )
}

proptest! {
    #[test]
    fn all_or_nothing_under_any_mix_and_clock(mix in mixes(), stream in requests()) {
        let mut keys = Keys::new(
            mix.iter().map(|&(kind, limit, window)| limiter(kind, limit, window)).collect(),
        );
        let count = keys.limiters.len();
        let mut now = T0;
        for (forward, back, request) in stream {
            now = now + ms(forward) - ms(back);
            let alone: Vec<Verdict> = (0..count).map(|i| keys.dry(i, now, request)).collect();
            let mut each_alone = keys.clone();
            let after_alone: Vec<Verdict> =
                (0..count).map(|i| each_alone.call(i, now, request)).collect();
            let before = keys.clone();
            let (verdicts, all) = keys.call_all(now, request);

            let admitted = request.action == Action::Refund || alone.iter().all(|v| !v.limited);
            prop_assert_eq!(all.limited, verdicts.iter().any(|v| v.limited));
            if admitted {
                // Charged to every limiter, exactly as each alone.
                for i in 0..count {
                    prop_assert_eq!(keys.stored(i), each_alone.stored(i));
                    prop_assert_eq!(verdicts[i], after_alone[i]);
                }
                if request.action == Action::Take {
                    prop_assert!(!all.limited);
                }
            } else {
                prop_assert!(all.limited);
                let never_fits = keys.limiters.iter().any(|l| request.quantity > l.limit());
                for i in 0..count {
                    if alone[i].limited {
                        // Refusing limiters: their own reply, and only a block stored.
                        prop_assert_eq!(verdicts[i], alone[i]);
                        let blocked = !never_fits && starts_block(&before, i, now, &request);
                        let expected = if blocked { each_alone.stored(i) } else { before.stored(i) };
                        prop_assert_eq!(keys.stored(i), expected);
                    } else {
                        // The others: untouched, and their standing uncharged.
                        prop_assert_eq!(keys.stored(i), before.stored(i));
                        prop_assert_eq!(verdicts[i], before.dry(i, now, take(0)));
                    }
                }
            }
        }
    }
}

/// Any request the grammar accepts for `limiters`: a quantity, `REFUND`, `BLOCK`, one of
/// `DELAY`, `AT_MOST` and `FORCE`, in the combinations the commands allow (none of them with
/// a lease).
fn any_request(with_lease: bool) -> impl Strategy<Value = Request> {
    let shortfall = prop_oneof![
        4 => Just(Shortfall::Refuse),
        1 => (0i64..3_000).prop_map(|wait| Shortfall::Delay(ms(wait))),
        1 => Just(Shortfall::AtMost),
        1 => Just(Shortfall::Force),
    ];
    let block = prop::option::weighted(0.3, (1i64..3_000).prop_map(ms));
    (0u64..9, any::<bool>(), block, shortfall).prop_map(
        move |(quantity, refund, block, shortfall)| {
            if with_lease {
                return take(quantity);
            }
            match (refund, block, shortfall) {
                (true, _, _) => Request::refund(quantity),
                (false, Some(_), Shortfall::Delay(_) | Shortfall::Force) => Request {
                    block,
                    ..take(quantity)
                },
                (false, block, shortfall) => Request {
                    block,
                    shortfall,
                    ..take(quantity)
                },
            }
        },
    )
}

/// A stream of calls: (ms forward, ms back now and then, dry run, the request, a lease to
/// release or renew).
fn any_calls(with_lease: bool) -> impl Strategy<Value = Vec<(i64, i64, bool, Request, u8)>> {
    prop::collection::vec(
        (
            0i64..600,
            prop_oneof![9 => Just(0i64), 1 => 0i64..500],
            prop::bool::weighted(0.1),
            any_request(with_lease),
            0u8..4,
        ),
        1..50,
    )
}

proptest! {
    /// The effects alone rebuild the master's keys, byte for byte and expiry included, for
    /// any mix of limiters (leases too) and any call the grammar accepts: the in-memory
    /// store applies every effect to a replica and compares after each call.
    #[test]
    fn effects_rebuild_the_masters_keys_under_any_call(
        (mix, stream) in prop::collection::vec((0u8..7, 2u64..9, 200i64..2_000), 1..5)
            .prop_flat_map(|mix| {
                let with_lease = mix.iter().any(|&(kind, _, _)| kind == 5);
                (Just(mix), any_calls(with_lease))
            }),
    ) {
        let limiters: Vec<Limiter> = mix
            .iter()
            .map(|&(kind, limit, window)| limiter(kind, limit, window))
            .collect();
        let keys = Keys::new(limiters.clone());
        let mut now = T0;
        let mut lease_ids = Vec::new();
        for (step, (forward, back, dry, request, lease_action)) in stream.into_iter().enumerate() {
            now = now + ms(forward) - ms(back);
            // A seed per call, as the server's generator gives.
            let seed = crate::core::siphash::siphash24([7, 11], step as u64);
            let call = Call { limiters: &limiters, request, now, write: !dry, seed };
            let (_, settled) = keys.memory.run_settled(&NAMES[..limiters.len()], &call).unwrap();
            if let Some(id) = settled.lease_id {
                // An id is drawn, never 0, and names no other lease of the key.
                prop_assert!(id > 0 && !lease_ids.contains(&id), "{} again in {:?}", id, lease_ids);
                lease_ids.push(id);
            }
            let lease_key = limiters.iter().position(|l| matches!(l, Limiter::Lease(_)));
            if lease_key.is_some_and(|index| keys.stored(index).is_none()) {
                lease_ids.clear();
            }
            // Now and then, a lease given back or renewed, as RL.RELEASE and RL.RENEW do.
            if let (Some(&id), Some(index)) = (lease_ids.last(), lease_key) {
                let change = match lease_action {
                    0 => LeaseChange::Release { id },
                    1 => LeaseChange::Renew { id, lease: ms(700) },
                    _ => continue,
                };
                keys.memory.change(NAMES[index], &Effect::Lease(LeaseEffect { now, change }), now);
                if keys.stored(index).is_none() {
                    lease_ids.clear();
                }
            }
        }
    }
}
