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

/// The GCRA of a `CL.THROTTLE` limiter.
fn gcra_of(limiter: &Limiter) -> &Gcra {
    match limiter {
        Limiter::Throttle(gcra) => gcra,
        _ => unreachable!("a throttle"),
    }
}

/// What is used of a bucket read under another rate, in requests: the backlog in the old
/// interval as the basis keeps it (rounded up), as [`Gcra::carried`] reads it.
fn requests_used(backlog: Micros, old: &Gcra) -> f64 {
    backlog.ticks().get() as f64 / old.basis().interval().get() as f64
}

#[test]
fn a_rate_raised_a_hundredfold_takes_effect_at_once() {
    // One request at 1 per second, then the rate raised to 100 per second.
    let mut key = Key::new(throttle(10, 1, 1));
    assert_eq!(in_seconds(key.call(T0, take(1))), [0, 11, 10, -1, 1]);
    let old = throttle(10, 1, 1);
    key.limiter = throttle(10, 100, 1);
    // What was used (one request) is one request at the new rate: 10 ms of the bucket, not
    // the old rate's second.
    let at = T0 + Micros::saturating(10);
    let verdict = key.call(at, take(1));
    assert!(!verdict.limited);
    assert_eq!(verdict.remaining, 9);
    let used = requests_used(Micros::saturating(1_000_000 - 10), gcra_of(&old));
    assert!(used > 0.999 && used < 1.0, "{used}");
    let expected = ((used + 1.0) * 10_000.0).ceil() as i64;
    let reset = verdict.reset_after.ceil_micros().get();
    assert!((reset - expected).abs() <= 1, "{reset} against {expected}");
    // And it stays the new rate's: nine more fit, then one every 10 ms.
    assert_eq!(in_seconds(key.call(at, take(9))), [0, 11, 0, -1, 1]);
    let refused = key.call(at, take(1));
    assert!(refused.limited);
    let wait = refused.retry_after.or(Ticks::ZERO).ceil_micros().get();
    assert!((9_990..=10_000).contains(&wait), "{wait}");
}

/// The cases: a bucket of 10 at 1 per 100 s used up (11 calls), then its burst
/// raised to 100 (the same rate): 10 were used, and 89 are left after the next.
#[test]
fn a_raised_burst_counts_what_was_used() {
    let mut key = Key::new(throttle(9, 1, 100));
    for _ in 0..11 {
        key.call(T0, take(1));
    }
    key.limiter = throttle(99, 1, 100);
    let verdict = key.call(T0 + ms(1), take(1));
    assert!(!verdict.limited, "{verdict:?}");
    assert_eq!(verdict.remaining, 89);
    // Its reset is the 11 requests at the rate: about 1,100 s, not a share's 10,000.
    assert_eq!(in_seconds(verdict)[4], 1_100);
}

#[test]
fn the_gateways_threshold_raised_online_counts_what_was_used() {
    // examples/nginx's default threshold, "500 1 100000000" (a bucket of 500, one more each
    // 100 s), then that caller's raised a hundredfold, "5 1 1000000".
    let mut key = Key::new(throttle(499, 1, 100));
    for _ in 0..5 {
        key.call(T0, take(1));
    }
    key.limiter = throttle(4, 1, 1);
    // Five were used: the new bucket of five is full, and refuses for a second at its rate.
    let refused = key.call(T0 + ms(1), take(1));
    assert!(refused.limited, "{refused:?}");
    // (To the basis's precision: what was used is read to a part in 1,024.)
    let wait = refused.retry_after.or(Ticks::ZERO).ceil_micros().get();
    assert!((996_000..=1_000_000).contains(&wait), "{wait}");
    // The refusal stored what was used at the new rate: a second later, one fits.
    let at = T0 + ms(1) + Micros::saturating(wait);
    assert!(!key.call(at, take(1)).limited);
}

#[test]
fn a_rate_lowered_counts_what_was_used_and_refuses_at_once() {
    let mut key = Key::new(throttle(10, 100, 1));
    assert_eq!(in_seconds(key.call(T0, take(11))), [0, 11, 0, -1, 1]);
    key.limiter = throttle(10, 1, 1);
    // The bucket was full (11 used): it is full at the new rate, the next unit in 1 s.
    let verdict = key.call(T0, take(1));
    assert_eq!(in_seconds(verdict), [1, 11, 0, 1, 11]);
    // To the basis's precision: what was used is read to a part in 1,024.
    let wait = verdict.retry_after.or(Ticks::ZERO).ceil_micros().get();
    assert!((989_000..=1_000_000).contains(&wait), "{wait}");
    // Half the burst, the same rate: 11 used is over the bucket of 5, and it drains at the
    // rate: nothing fits for 6 s, the bucket is empty in 11.
    key.limiter = throttle(4, 1, 1);
    assert_eq!(in_seconds(key.dry(T0, take(0))), [1, 5, 0, 6, 11]);
}

#[test]
fn a_refusal_after_a_change_holds_its_retry_after_whatever_happens_meanwhile() {
    let mut key = Key::new(throttle(4, 1, 1));
    key.call(T0, take(5));
    key.limiter = throttle(4, 10, 1);
    let refused = key.call(T0 + ms(50), take(5));
    assert!(refused.limited);
    let wait = refused.retry_after.or(Ticks::ZERO).ceil_micros();
    // Dry runs and refusals between change nothing of the answer.
    key.dry(T0 + ms(60), take(1));
    assert!(key.call(T0 + ms(70), take(5)).limited);
    let at = T0 + ms(50) + wait;
    assert!(key.call(at - Micros::saturating(1), take(5)).limited);
    assert!(!key.call(at, take(5)).limited);
}

/// Under changed parameters a refused take writes what was used at the new rate; a peek
/// and a quantity that can never fit write nothing, as ever.
#[test]
fn only_a_refused_take_that_could_fit_stores_the_carried_state() {
    let mut key = Key::new(throttle(4, 1, 1));
    key.call(T0, take(5));
    let written = key.stored();
    key.limiter = throttle(4, 10, 1);
    assert!(key.call(T0 + ms(10), take(0)).remaining < 5);
    assert!(key.call(T0 + ms(10), take(6)).limited);
    assert_eq!(key.stored(), written, "a peek or an oversized take wrote");
    assert!(key.call(T0 + ms(10), take(5)).limited);
    assert_ne!(
        key.stored(),
        written,
        "the refusal kept the old rate's state"
    );
    // Written at the new rate: the same parameters read it as it is, and it drains at 10 a
    // second, so 5 fit half a second later.
    assert!(!key.call(T0 + ms(510), take(5)).limited);
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

/// A state of 5fec6b4's layout (the tolerance and when it was written, then the TAT) read
/// under other parameters: the share of the bucket in use when written, as that release read
/// it (it kept no rate).
#[test]
fn a_state_of_5fec6b4_is_read_as_the_share_it_kept() {
    // A bucket of 5 at 1 a second, 2 s used, written at T0; read under a bucket of 10.
    let tolerance_nanos: u64 = 5_000_000_000;
    let mut value = vec![0xF8];
    value.extend_from_slice(&tolerance_nanos.to_le_bytes());
    value.extend_from_slice(&T0.get().to_le_bytes()[..7]);
    value.extend_from_slice(&(T0 + ms(2_000)).ticks().get().to_le_bytes()[..11]);
    let mut key = Key::new(throttle(9, 1, 1));
    key.memory_set(&value, T0 + ms(2_000));
    // 2 of 5 is 4 of 10: four seconds at 1 a second.
    assert_eq!(key.dry(T0, take(0)).reset_after, ms(4_000).ticks());
}

/// A fluid token bucket in floating point: `used` units of `capacity` at `since`, draining
/// at `rate` units per second, the rate of the parameters that wrote it. A change of
/// parameters counts what was used in requests: at the next request, the units left at the
/// written rate (its interval as the basis keeps it) count at the new one, at most the
/// capacity; the request writes them at the new rate if admitted, or if refused (a refusal
/// stores the carried state). What the GCRA's replies must agree with, away from ties.
struct FluidBucket {
    capacity: f64,
    rate: f64,
    /// The rate the state was written at.
    written_rate: f64,
    /// The interval its basis keeps (rounded up), in seconds.
    written_basis: f64,
    /// The current interval as a basis keeps it, in seconds: kept as the interval itself
    /// (a rate's reciprocal need not give the same double back, which read an unchanged
    /// basis as a changed one).
    basis: f64,
    /// Whether the current basis differs from the written one.
    carries: bool,
    used: f64,
    since: f64,
    /// When the key expires, in seconds: when the bucket written last empties at the rate
    /// of the parameters that wrote it, rounded up to a millisecond, as a key's expiry is.
    /// A key gone is a full bucket, whatever the parameters now.
    expires: f64,
}

/// `gcra`'s emission interval in seconds, exactly and as a state's basis keeps it.
fn intervals(gcra: &Gcra) -> (f64, f64) {
    let tick = |ticks: Ticks| ticks.get() as f64 / Ticks::SECOND.get() as f64;
    (
        tick(gcra.emission_interval()),
        tick(gcra.basis().interval()),
    )
}

impl FluidBucket {
    /// A bucket of `capacity` at `interval` seconds a unit (as written: `written`).
    fn new(capacity: f64, interval: (f64, f64)) -> FluidBucket {
        FluidBucket {
            capacity,
            rate: 1.0 / interval.0,
            written_rate: 1.0 / interval.0,
            written_basis: interval.1,
            basis: interval.1,
            carries: false,
            used: 0.0,
            since: 0.0,
            expires: 0.0,
        }
    }

    /// Whether `quantity` fits at `now` (`None` within a hair of the edge), charging it when
    /// it does.
    fn take(&mut self, now: f64, quantity: f64) -> Option<bool> {
        if (now - self.expires).abs() < 1e-7 {
            return None;
        }
        if now > self.expires {
            self.used = 0.0;
        }
        // Units left at the written rate; read at this rate.
        let left = (self.used - (now - self.since) * self.written_rate).max(0.0);
        let used = if self.carries {
            (left / self.written_rate / self.written_basis).min(self.capacity)
        } else {
            left * self.rate / self.written_rate
        };
        let room = self.capacity - used - quantity;
        if room.abs() < 1e-6 * self.capacity.max(1.0) {
            return None;
        }
        if room > 0.0 {
            self.charge(now, used + quantity);
        } else if self.carries && used > 0.0 && quantity <= self.capacity {
            // A refusal stores what was used at the new rate (not one for a quantity that
            // can never fit, which stores nothing).
            self.charge(now, used);
        }
        Some(room > 0.0)
    }

    /// Stores `used` at `now` at the current rate, as a write does.
    fn charge(&mut self, now: f64, used: f64) {
        self.used = used;
        self.since = now;
        self.written_rate = self.rate;
        self.written_basis = self.basis;
        self.carries = false;
        self.expires = ((now + used / self.rate) * 1e3 - 1e-9).ceil() / 1e3;
    }

    fn change(&mut self, capacity: f64, interval: (f64, f64)) {
        self.capacity = capacity;
        self.rate = 1.0 / interval.0;
        self.basis = interval.1;
        self.carries = interval.1 != self.written_basis;
    }
}

proptest! {
    /// Any parameters, any change between them, any requests: the GCRA admits what the fluid
    /// model admits, what was used counted in requests at each change.
    #[test]
    fn changed_parameters_count_what_was_used(
        phases in proptest::collection::vec(
            (0i64..20, 1i64..50, 1i64..10, proptest::collection::vec((0i64..700, 1u64..8), 1..12)),
            1..5,
        ),
    ) {
        let mut key: Option<Key> = None;
        let mut model = FluidBucket::new(1.0, (1.0, 1.0));
        let mut now = T0;
        for (max_burst, count, period, requests) in phases {
            let limiter = throttle(max_burst, count, period);
            let Limiter::Throttle(gcra) = limiter else { unreachable!() };
            let capacity = (max_burst + 1) as f64;
            match key.as_mut() {
                Some(key) => {
                    key.limiter = limiter;
                    model.change(capacity, intervals(&gcra));
                }
                None => {
                    key = Some(Key::new(limiter));
                    model = FluidBucket::new(capacity, intervals(&gcra));
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
                    let left = if seconds >= model.expires { 0.0 } else { model.used - (seconds - model.since) * model.written_rate };
                    model.charge(seconds, left.max(0.0) + quantity as f64);
                }
            }
        }
    }
}
