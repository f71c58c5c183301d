//! Refunds, blocks and dry runs, for every algorithm, through the decisions the Redis layer
//! stores: unit tests with exact replies, and properties along random request streams.

use proptest::prelude::*;

use super::*;
use crate::core::testing::*;
use crate::core::time::{Micros, Ticks, Unit};
use crate::core::windows::Algorithm;

#[test]
fn a_refund_of_what_was_just_taken_restores_the_standing_and_the_state() {
    for limiter in every_algorithm() {
        let mut key = Key::new(limiter);
        key.call(T0 + ms(10), take(2));
        let standing = key.dry(T0 + ms(10), take(0));
        let state = key.stored();
        key.call(T0 + ms(10), take(2));
        let after = key.call(T0 + ms(10), refund(2));
        assert_eq!(after, standing, "{limiter:?}");
        assert_eq!(key.dry(T0 + ms(10), take(0)), standing, "{limiter:?}");
        if !matches!(limiter, Limiter::Log(_)) {
            // The log keeps its (equivalent) entries in a ring of another capacity.
            assert_eq!(key.stored(), state, "{limiter:?}");
        }
    }
}

#[test]
fn a_refund_never_gives_more_than_was_counted_and_a_key_left_empty_goes() {
    for limiter in every_algorithm() {
        let mut key = Key::new(limiter);
        assert_eq!(key.reply(T0, refund(3)), [0, 5, 5, -1, 0], "{limiter:?}");
        assert_eq!(
            key.stored(),
            None,
            "a refund on a missing key writes nothing"
        );
        key.call(T0, take(3));
        let reply = key.reply(T0, refund(100));
        assert_eq!(reply, [0, 5, 5, -1, 0], "{limiter:?}");
        assert_eq!(key.stored(), None, "{limiter:?}");
    }
}

#[test]
fn window_refunds_come_off_the_newest_buckets_first() {
    let limiter = WindowLimiter::new(10, 1_000, Unit::Milliseconds, Algorithm::Buckets(4)).unwrap();
    let mut key = Key::new(Limiter::Window(limiter));
    key.call(T0, take(3));
    key.call(T0 + ms(500), take(4));
    // The newest bucket (4) loses 4, the older one 1: 2 left, all in the first bucket.
    assert_eq!(key.reply(T0 + ms(600), refund(5)), [0, 10, 8, -1, 400]);
    assert_eq!(key.reply(T0 + ms(600), take(8)), [0, 10, 0, -1, 900]);
}

#[test]
fn a_log_refund_takes_back_the_newest_entries() {
    let mut key = Key::new(Limiter::Log(
        LogLimiter::new(5, 1_000, Unit::Milliseconds).unwrap(),
    ));
    key.call(T0, take(2));
    key.call(T0 + ms(400), take(3));
    // The three from +400 ms go first: the oldest two remain, leaving at +1 s.
    assert_eq!(key.reply(T0 + ms(500), refund(3)), [0, 5, 3, -1, 500]);
    assert_eq!(key.reply(T0 + ms(500), refund(1)), [0, 5, 4, -1, 500]);
}

#[test]
fn a_block_holds_for_exactly_its_duration_whatever_the_calls() {
    for limiter in every_algorithm() {
        let mut key = Key::new(limiter);
        key.call(T0, take(5));
        // Refused because the limit is used up: blocked for 3 s from now, this call too.
        let reply = key.reply(T0 + ms(1), blocking(1, 3_000));
        assert_eq!(reply, [1, 5, 0, 3_000, 3_000], "{limiter:?}");
        // Every call during the block is refused, even peeks and calls without BLOCK; none
        // extends it.
        for (at, request) in [
            (500, take(1)),
            (1_500, take(0)),
            (2_000, blocking(1, 9_000)),
        ] {
            let left = 3_001 - at;
            assert_eq!(
                key.reply(T0 + ms(at), request),
                [1, 5, 0, left, left],
                "{limiter:?} {at}"
            );
        }
        assert_eq!(
            key.reply(T0 + ms(3_000), take(0))[..4],
            [1, 5, 0, 1],
            "{limiter:?}"
        );
        // Then the limiter is what it would have been: every algorithm refilled by now.
        assert_eq!(
            key.reply(T0 + ms(3_001), take(1))[..3],
            [0, 5, 4],
            "{limiter:?}"
        );
    }
}

#[test]
fn a_quantity_that_never_fits_starts_no_block_and_a_blocked_one_still_says_never() {
    for limiter in every_algorithm() {
        let mut key = Key::new(limiter);
        key.call(T0, take(5));
        assert_eq!(key.reply(T0, blocking(6, 1_000))[3], -1, "{limiter:?}");
        assert!(!key.dry(T0, take(0)).limited, "{limiter:?}");
        key.call(T0, blocking(1, 1_000));
        let reply = key.reply(T0 + ms(10), take(6));
        assert_eq!(reply[..4], [1, 5, 0, -1], "{limiter:?}");
        assert!(reply[4] >= 990, "{limiter:?}");
    }
}

#[test]
fn a_refund_during_a_block_gives_back_and_keeps_the_block() {
    for limiter in every_algorithm() {
        let mut key = Key::new(limiter);
        key.call(T0, take(5));
        key.call(T0, blocking(1, 2_000));
        assert_eq!(
            key.reply(T0 + ms(100), refund(5)),
            [1, 5, 0, 1_900, 1_900],
            "{limiter:?}"
        );
        assert!(key.live(T0 + ms(1_999)).is_some(), "{limiter:?}");
        assert_eq!(
            key.reply(T0 + ms(2_000), take(5))[..3],
            [0, 5, 0],
            "{limiter:?}"
        );
    }
}

// --- Properties -------------------------------------------------------------------------

/// A request of a random kind: takes (some blocking), peeks and refunds.
fn requests() -> impl Strategy<Value = Vec<(i64, Request)>> {
    let request = prop_oneof![
        4 => (0u64..7).prop_map(take),
        2 => (1u64..7, 1i64..3_000).prop_map(|(q, block)| blocking(q, block)),
        2 => (0u64..7).prop_map(refund),
    ];
    prop::collection::vec((0i64..700, request), 1..80)
}

proptest! {
    #[test]
    fn a_dry_run_replies_what_the_write_replies_and_stores_nothing(
        algorithm in 0usize..5,
        stream in requests(),
    ) {
        let mut key = Key::new(every_algorithm()[algorithm]);
        let mut now = T0;
        for (step, request) in stream {
            now = now + Micros::saturating(ms(step).get() / 7);
            let before = key.stored();
            if request.action == Action::Take {
                let dry = key.dry(now, request);
                prop_assert_eq!(&key.stored(), &before);
                prop_assert_eq!(key.call(now, request), dry);
            } else {
                key.call(now, request);
            }
        }
    }

    #[test]
    fn remaining_never_exceeds_the_limit_and_blocks_never_extend(
        algorithm in 0usize..5,
        stream in requests(),
    ) {
        let mut key = Key::new(every_algorithm()[algorithm]);
        let mut now = T0;
        // When the current block ends, as first announced.
        let mut block_end: Option<Micros> = None;
        for (step, request) in stream {
            now = now + Micros::saturating(ms(step).get() / 7);
            let blocked_before = block_end.filter(|&end| end > now);
            let verdict = key.call(now, request);
            prop_assert!((0..=5).contains(&verdict.remaining));
            match blocked_before {
                Some(end) => {
                    // Refused (takes), at most until the announced end, never later.
                    if request.action == Action::Take {
                        prop_assert!(verdict.limited);
                    }
                    let left = (end - now).ticks();
                    if let Some(retry) = verdict.retry_after.get() {
                        prop_assert!(retry >= left);
                    }
                    prop_assert!(verdict.reset_after >= left);
                    prop_assert_eq!(key.dry(now, take(0)).limited, true);
                }
                None => {
                    if verdict.limited && request.block.is_some() && verdict.retry_after.is_some() {
                        let duration = request.block.unwrap();
                        block_end = Some(now + duration);
                        let retry = verdict.retry_after.get().unwrap();
                        prop_assert!(retry >= duration.ticks());
                    }
                }
            }
        }
        // Once every block announced has ended, peeks are no longer blocked.
        if let Some(end) = block_end {
            let reply = key.dry(end.max(now), take(0));
            prop_assert_eq!(reply.remaining == 0 && reply.limited, false);
        }
    }
}

/// `CL.THROTTLE`'s parameters, in seconds as redis-cell's tests give them.
fn throttle(max_burst: i64, count: i64, period: i64) -> Limiter {
    Limiter::Throttle(Gcra::new(max_burst, count, period, Unit::Seconds).unwrap())
}

/// A reply in seconds, rounded as redis-cell rounds.
fn in_seconds(verdict: Verdict) -> [i64; 5] {
    verdict.to_reply(Unit::Seconds, crate::core::time::Rounding::RedisCell)
}

#[test]
fn a_rate_raised_a_hundredfold_takes_effect_at_once() {
    // The case: one request at 1 per second, then the rate raised to 100 per second.
    let mut key = Key::new(throttle(10, 1, 1));
    assert_eq!(in_seconds(key.call(T0, take(1))), [0, 11, 10, -1, 1]);
    key.limiter = throttle(10, 100, 1);
    // What was used (1 of 11) is 1 of 11 at the new rate: 10 ms, not the old rate's 1 s.
    let at = T0 + Micros::saturating(10);
    let verdict = key.call(at, take(1));
    assert!(!verdict.limited);
    assert_eq!(verdict.remaining, 9);
    assert_eq!(
        verdict.reset_after.ceil_micros(),
        Micros::saturating(19_990)
    );
    // And it stays the new rate's: ten more fit, then one every 10 ms.
    assert_eq!(in_seconds(key.call(at, take(9))), [0, 11, 0, -1, 1]);
    let refused = key.call(at, take(1));
    assert!(refused.limited);
    // The next unit at the new rate: 10 ms after the first call's share, carried.
    assert_eq!(
        refused.retry_after.or(Ticks::ZERO).ceil_micros(),
        Micros::saturating(9_990)
    );
}

#[test]
fn the_gateways_threshold_raised_online_admits_the_caller() {
    // examples/nginx's default threshold, "500 1 100000000" (a bucket of 500, one more each
    // 100 s), then that caller's raised a hundredfold, "5 1 1000000".
    let mut key = Key::new(throttle(499, 1, 100));
    for _ in 0..5 {
        key.call(T0, take(1));
    }
    key.limiter = throttle(4, 1, 1);
    let verdict = key.call(T0 + ms(1), take(1));
    assert!(!verdict.limited, "{verdict:?}");
    // 5 of 500 in use is 1% of the bucket of 5: three whole units more fit.
    assert_eq!(verdict.remaining, 3);
}

#[test]
fn a_rate_lowered_keeps_the_share_in_use_and_refuses_at_once() {
    let mut key = Key::new(throttle(10, 100, 1));
    assert_eq!(in_seconds(key.call(T0, take(11))), [0, 11, 0, -1, 1]);
    key.limiter = throttle(10, 1, 1);
    // The bucket was full: it is full at the new rate, the next unit in 1 s.
    let verdict = key.call(T0, take(1));
    assert_eq!(in_seconds(verdict), [1, 11, 0, 1, 11]);
    assert_eq!(
        verdict.retry_after.or(Ticks::ZERO),
        Micros::saturating(1_000_000).ticks()
    );
    // Half the burst, the same rate: the share in use (all of it) fills the smaller bucket.
    key.limiter = throttle(4, 1, 1);
    assert_eq!(in_seconds(key.dry(T0, take(0))), [0, 5, 0, -1, 5]);
}

#[test]
fn a_refusal_after_a_change_holds_its_retry_after_whatever_happens_meanwhile() {
    let mut key = Key::new(throttle(4, 1, 1));
    key.call(T0, take(5));
    key.limiter = throttle(4, 10, 1);
    let refused = key.call(T0 + ms(50), take(5));
    assert!(refused.limited);
    let wait = refused.retry_after.or(Ticks::ZERO).ceil_micros();
    // Dry runs and refusals between write nothing, and change nothing of the answer.
    key.dry(T0 + ms(60), take(1));
    assert!(key.call(T0 + ms(70), take(5)).limited);
    let at = T0 + ms(50) + wait;
    assert!(key.call(at - Micros::saturating(1), take(5)).limited);
    assert!(!key.call(at, take(5)).limited);
}

#[test]
fn an_earlier_releases_state_is_read_under_the_calls_parameters() {
    // The first releases' layout (and redis-cell's) kept no basis: read as today.
    let tat = (T0 + ms(2_000)).ticks().get();
    let mut v1 = vec![0xF8];
    v1.extend_from_slice(&tat.to_le_bytes()[..11]);
    for limiter in [throttle(4, 1, 1), throttle(4, 100, 1)] {
        let mut key = Key::new(limiter);
        key.memory_set(&v1, T0 + ms(2_000));
        // Two seconds of debt in either rate's units, as before this release.
        let verdict = key.dry(T0, take(0));
        assert_eq!(verdict.reset_after, ms(2_000).ticks(), "{limiter:?}");
    }
}

/// A fluid token bucket in floating point: `used` units of `capacity` at `since`, draining
/// at `rate` units per second, a change of parameters carrying the share in use at the last
/// write. What the GCRA's replies must agree with, away from ties.
struct FluidBucket {
    capacity: f64,
    rate: f64,
    used: f64,
    since: f64,
    /// When the key expires, in seconds: when the bucket written last empties at the rate
    /// of the parameters that wrote it, rounded up to a millisecond, as a key's expiry is.
    /// A key gone is a full bucket, whatever the parameters now.
    expires: f64,
}

impl FluidBucket {
    /// Whether `quantity` fits at `now` (`None` within a hair of the edge), charging it when
    /// it does.
    fn take(&mut self, now: f64, quantity: f64) -> Option<bool> {
        if (now - self.expires).abs() < 1e-7 {
            return None;
        }
        if now > self.expires {
            self.used = 0.0;
        }
        let used = (self.used - (now - self.since) * self.rate).max(0.0);
        let room = self.capacity - used - quantity;
        if room.abs() < 1e-6 * self.capacity.max(1.0) {
            return None;
        }
        if room > 0.0 {
            self.charge(now, used + quantity);
        }
        Some(room > 0.0)
    }

    /// Stores `used` at `now`, as an admitted request writes its state.
    fn charge(&mut self, now: f64, used: f64) {
        self.used = used;
        self.since = now;
        self.expires = ((now + used / self.rate) * 1e3 - 1e-9).ceil() / 1e3;
    }

    fn change(&mut self, capacity: f64, rate: f64) {
        self.used = self.used.min(self.capacity) / self.capacity * capacity;
        (self.capacity, self.rate) = (capacity, rate);
    }
}

proptest! {
    /// Any parameters, any change between them, any requests: the GCRA admits what the fluid
    /// model admits, the share in use carried over at each change.
    #[test]
    fn changed_parameters_carry_the_share_in_use(
        phases in proptest::collection::vec(
            (0i64..20, 1i64..50, 1i64..10, proptest::collection::vec((0i64..700, 1u64..8), 1..12)),
            1..5,
        ),
    ) {
        let mut key: Option<Key> = None;
        let mut model = FluidBucket { capacity: 1.0, rate: 1.0, used: 0.0, since: 0.0, expires: 0.0 };
        let mut now = T0;
        for (max_burst, count, period, requests) in phases {
            let limiter = throttle(max_burst, count, period);
            let (capacity, rate) = ((max_burst + 1) as f64, count as f64 / period as f64);
            match key.as_mut() {
                Some(key) => {
                    key.limiter = limiter;
                    model.change(capacity, rate);
                }
                None => {
                    key = Some(Key::new(limiter));
                    model = FluidBucket { capacity, rate, used: 0.0, since: 0.0, expires: 0.0 };
                }
            }
            let key = key.as_mut().unwrap();
            for (step, quantity) in requests {
                now = now + ms(step);
                let seconds = (now - T0).get() as f64 / 1e6;
                let admitted = !key.call(now, take(quantity)).limited;
                if let Some(expected) = model.take(seconds, quantity as f64) {
                    prop_assert_eq!(admitted, expected, "at {} s, {} of {}", seconds, quantity, capacity);
                } else if admitted {
                    // At an edge: follow what the GCRA did.
                    let left = if seconds >= model.expires { 0.0 } else { model.used - (seconds - model.since) * model.rate };
                    model.charge(seconds, left.max(0.0) + quantity as f64);
                }
            }
        }
    }
}
