//! All or nothing, over random mixes of limiters and clocks: a call over several keys is
//! settled by [`conclude`] from what each limiter decides alone, and checked against what
//! each limiter alone would do.

use proptest::prelude::*;

use super::*;
use crate::core::gcra::Gcra;
use crate::core::limiter::Limiter;
use crate::core::log::LogLimiter;
use crate::core::testing::*;
use crate::core::time::{Rounding, Unit};
use crate::core::window::{Algorithm, WindowLimiter};

/// One key of a call, decided.
struct Slot<'a> {
    key: &'a mut Key,
    now: i64,
    request: Request,
    verdict: Verdict,
    starts_block: bool,
}

impl Decided for Slot<'_> {
    type Error = ();

    fn verdict(&self) -> Verdict {
        self.verdict
    }

    fn limit(&self) -> u64 {
        self.key.limiter.limit()
    }

    fn starts_block(&self) -> bool {
        self.starts_block
    }

    fn commit(&mut self) -> Result<Verdict, ()> {
        Ok(self.key.call(self.now, self.request))
    }

    fn standing(&mut self) -> Result<Verdict, ()> {
        Ok(self.key.dry(self.now, take(0)))
    }
}

/// Whether `request` on `key` alone would start a block: refused for lack of room, with
/// `BLOCK`, on a key not blocked already.
fn starts_block(key: &Key, now: i64, request: &Request) -> bool {
    let mut alone = key.clone();
    let before = alone.live(now);
    let verdict = alone.call(now, *request);
    verdict.limited && alone.stored != before && request.action == Action::Take
}

/// A call over `keys`, as RL.ALL makes it; returns each key's reply and the combined one.
fn call_all(keys: &mut [Key], now: i64, request: Request) -> (Vec<Verdict>, Verdict) {
    let mut slots: Vec<Option<Slot>> = keys
        .iter_mut()
        .map(|key| {
            let verdict = key.dry(now, request);
            let starts_block = starts_block(key, now, &request);
            Some(Slot {
                key,
                now,
                request,
                verdict,
                starts_block,
            })
        })
        .collect();
    let mut verdicts = vec![Verdict::default(); slots.len()];
    conclude(&mut slots, &request, true, &mut verdicts).unwrap();
    let all = combined(&verdicts);
    (verdicts, all)
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
        _ => Limiter::Log(LogLimiter::new(limit, window_ms, Unit::Milliseconds).unwrap()),
    }
}

#[test]
fn per_second_and_per_minute_together() {
    // 3 per second and 5 per minute, exactly: the second limit binds after 5.
    let mut keys = [
        Key::new(limiter(4, 3, 1_000)),
        Key::new(limiter(4, 5, 60_000)),
    ];
    let reply = |(_, all): (Vec<Verdict>, Verdict)| all.to_reply(Unit::Milliseconds, Rounding::Up);
    assert_eq!(
        reply(call_all(&mut keys, T0, take(1))),
        [0, 3, 2, -1, 60_000]
    );
    assert_eq!(
        reply(call_all(&mut keys, T0, take(2))),
        [0, 3, 0, -1, 60_000]
    );
    // The per-second limit refuses: nothing is charged to the per-minute one.
    assert_eq!(
        reply(call_all(&mut keys, T0, take(1))),
        [1, 3, 0, 1_000, 60_000]
    );
    assert_eq!(keys[1].dry(T0, take(0)).remaining, 2);
    assert_eq!(
        reply(call_all(&mut keys, T0 + ms(1_000), take(2))),
        [0, 5, 0, -1, 60_000]
    );
    // Now the per-minute one binds: retry when its first entries leave.
    let (verdicts, all) = call_all(&mut keys, T0 + ms(2_000), take(1));
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
    let mut keys = [
        Key::new(limiter(1, 2, 1_000)),
        Key::new(limiter(0, 10, 1_000)),
    ];
    call_all(&mut keys, T0, take(2));
    let before: Vec<Stored> = keys.iter().map(|key| key.stored.clone()).collect();
    let (_, all) = call_all(&mut keys, T0, blocking(5, 10_000));
    assert_eq!(
        all.to_reply(Unit::Milliseconds, Rounding::Up)[..4],
        [1, 2, 0, -1]
    );
    let after: Vec<Stored> = keys.iter().map(|key| key.stored.clone()).collect();
    assert_eq!(after, before);
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
        let mut keys: Vec<Key> = mix
            .iter()
            .map(|&(kind, limit, window)| Key::new(limiter(kind, limit, window)))
            .collect();
        let mut now = T0;
        for (forward, back, request) in stream {
            now = now + ms(forward) - ms(back);
            let alone: Vec<Verdict> = keys.iter().map(|key| key.dry(now, request)).collect();
            let mut each_alone: Vec<Key> = keys.clone();
            let after_alone: Vec<Verdict> =
                each_alone.iter_mut().map(|key| key.call(now, request)).collect();
            let before: Vec<Key> = keys.clone();
            let (verdicts, all) = call_all(&mut keys, now, request);

            let admitted = request.action == Action::Refund || alone.iter().all(|v| !v.limited);
            prop_assert_eq!(all.limited, verdicts.iter().any(|v| v.limited));
            if admitted {
                // Charged to every limiter, exactly as each alone.
                for (i, key) in keys.iter().enumerate() {
                    prop_assert_eq!(&key.stored, &each_alone[i].stored);
                    prop_assert_eq!(verdicts[i], after_alone[i]);
                }
                if request.action == Action::Take {
                    prop_assert!(!all.limited);
                }
            } else {
                prop_assert!(all.limited);
                let never_fits = keys.iter().any(|key| request.quantity > key.limiter.limit());
                for (i, key) in keys.iter().enumerate() {
                    if alone[i].limited {
                        // Refusing limiters: their own reply, and only a block stored.
                        prop_assert_eq!(verdicts[i], alone[i]);
                        let blocked = !never_fits && starts_block(&before[i], now, &request);
                        let expected = if blocked { &each_alone[i].stored } else { &before[i].stored };
                        prop_assert_eq!(&key.stored, expected);
                    } else {
                        // The others: untouched, and their standing uncharged.
                        prop_assert_eq!(&key.stored, &before[i].stored);
                        prop_assert_eq!(verdicts[i], before[i].dry(now, take(0)));
                    }
                }
            }
        }
    }
}
