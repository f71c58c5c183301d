//! Refunds, blocks and dry runs, for every algorithm, through the decisions the Redis layer
//! stores: unit tests with exact replies, and properties along random request streams.

use proptest::prelude::*;

use super::*;
use crate::core::testing::*;
use crate::core::time::{Micros, Unit};
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
