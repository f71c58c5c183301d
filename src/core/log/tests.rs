use super::*;
use crate::core::params::MAX_LOG_LIMIT;
use crate::core::time::Rounding;
use proptest::prelude::*;

const T0: Micros = Micros::saturating(1_700_000_000_000_000);

fn ms(millis: i64) -> Micros {
    Micros::saturating(millis * 1_000)
}

fn limiter(limit: i64, window_ms: i64) -> LogLimiter {
    LogLimiter::new(limit, window_ms, Unit::Milliseconds).unwrap()
}

/// One call, as the command makes it: peeks and oversized quantities only inspect.
fn call(limiter: &LogLimiter, log: &mut SlidingLog, now: Micros, quantity: u64) -> (Verdict, bool) {
    if quantity == 0 || quantity > limiter.limit() {
        (limiter.inspect(Some(log), now, quantity), false)
    } else {
        limiter.apply(log, now, quantity)
    }
}

fn reply(limiter: &LogLimiter, log: &mut SlidingLog, now: Micros, quantity: u64) -> [i64; 5] {
    call(limiter, log, now, quantity)
        .0
        .to_reply(Unit::Milliseconds, Rounding::Up)
}

#[test]
fn refills_exactly_as_the_oldest_entries_leave() {
    let limiter = limiter(5, 2_000);
    let mut log = SlidingLog::default();
    for remaining in [4, 3, 2] {
        assert_eq!(
            reply(&limiter, &mut log, T0, 1),
            [0, 5, remaining, -1, 2_000]
        );
    }
    for remaining in [1, 0] {
        assert_eq!(
            reply(&limiter, &mut log, T0 + ms(1_000), 1),
            [0, 5, remaining, -1, 2_000]
        );
    }
    assert_eq!(
        reply(&limiter, &mut log, T0 + ms(1_500), 1),
        [1, 5, 0, 500, 1_500]
    );
    assert_eq!(
        reply(&limiter, &mut log, T0 + ms(1_500), 3),
        [1, 5, 0, 500, 1_500]
    );
    assert_eq!(
        reply(&limiter, &mut log, T0 + ms(1_500), 4),
        [1, 5, 0, 1_500, 1_500]
    );
    // At t0 + 2.1 s the three from t0 have left: exactly three more fit.
    for remaining in [2, 1, 0] {
        assert_eq!(
            reply(&limiter, &mut log, T0 + ms(2_100), 1),
            [0, 5, remaining, -1, 2_000]
        );
    }
    assert_eq!(
        reply(&limiter, &mut log, T0 + ms(2_100), 1),
        [1, 5, 0, 900, 2_000]
    );
    assert_eq!(
        log.len(),
        2,
        "the expired entries were dropped, the same-time ones merged"
    );
    assert_eq!(limiter.expire_at(&log), (T0 + ms(4_100)).ceil_millis());
}

#[test]
fn a_quantity_takes_one_entry_up_to_1024() {
    let limiter = limiter(10_000, 1_000);
    let mut log = SlidingLog::default();
    limiter.apply(&mut log, T0, 1_000);
    assert_eq!(log.len(), 1);
    limiter.apply(&mut log, T0, 24);
    assert_eq!(log.len(), 1);
    limiter.apply(&mut log, T0, 3_000);
    assert_eq!((log.len(), log.total()), (4, 4_024));
    // The oldest units leave first, entry by entry.
    let (verdict, _) = limiter.apply(&mut log, T0 + Micros::saturating(1), 6_000);
    assert_eq!(
        verdict.retry_after,
        Some((ms(1_000) - Micros::saturating(1)).ticks())
    );
}

#[test]
fn a_peek_and_an_oversized_request_change_nothing() {
    let limiter = limiter(3, 1_000);
    let mut log = SlidingLog::default();
    assert_eq!(reply(&limiter, &mut log, T0, 0), [0, 3, 3, -1, 0]);
    assert!(log.is_empty());
    limiter.apply(&mut log, T0, 2);
    let before = log.clone();
    assert_eq!(
        reply(&limiter, &mut log, T0 + ms(100), 0),
        [0, 3, 1, -1, 900]
    );
    assert_eq!(
        reply(&limiter, &mut log, T0 + ms(100), 4),
        [1, 3, 1, -1, 900]
    );
    assert_eq!(log, before);
    // Long after, the stale entries still read as gone.
    assert_eq!(
        reply(&limiter, &mut log, T0 + ms(5_000), 0),
        [0, 3, 3, -1, 0]
    );
}

#[test]
fn a_refused_request_changes_nothing() {
    let limiter = limiter(2, 1_000);
    let mut log = SlidingLog::default();
    limiter.apply(&mut log, T0, 2);
    let before = log.clone();
    let (verdict, changed) = limiter.apply(&mut log, T0 + ms(10), 1);
    assert!(verdict.limited && !changed);
    assert_eq!(log, before);
}

#[test]
fn lowering_the_limit_drops_the_oldest_units_once() {
    let mut log = SlidingLog::default();
    let high = limiter(10, 1_000);
    for i in 0..10 {
        high.apply(&mut log, T0 + ms(i * 10), 1);
    }
    let low = limiter(3, 1_000);
    let peek = low.inspect(Some(&log), T0 + ms(100), 1);
    let (verdict, changed) = low.apply(&mut log, T0 + ms(100), 1);
    assert!(changed);
    assert_eq!(verdict, peek, "trimming does not change the reply");
    assert_eq!((log.len(), log.total()), (3, 3));
    // The newest three remain: the next fits when the first of them leaves.
    assert_eq!(verdict.retry_after, Some((ms(1_070) - ms(100)).ticks()));
    let (_, changed) = low.apply(&mut log, T0 + ms(101), 1);
    assert!(!changed, "once trimmed, refusals write nothing");
}

#[test]
fn the_ring_grows_no_further_than_the_limit_and_shrinks_when_idle() {
    let limiter = limiter(10_000, 60_000);
    let mut log = SlidingLog::default();
    for i in 0..10_000 {
        limiter.apply(&mut log, T0 + Micros::saturating(i), 1);
    }
    assert_eq!(log.len(), 10_000);
    // 10,000 entries and the header fill jemalloc's 80 KiB class: 8.2 bytes per entry.
    assert_eq!(log.allocated_bytes(), 81_920);
    // A minute later, one request drops the whole window and the memory with it.
    limiter.apply(&mut log, T0 + ms(120_000), 1);
    assert_eq!(log.len(), 1);
    assert!(log.allocated_bytes() <= 48, "{}", log.allocated_bytes());
}

#[test]
fn a_clock_going_back_logs_at_the_newest_time() {
    let limiter = limiter(2, 1_000);
    let mut log = SlidingLog::default();
    limiter.apply(&mut log, T0 + ms(500), 1);
    let (verdict, _) = limiter.apply(&mut log, T0, 1);
    assert_eq!(verdict.reset_after, ms(1_500).ticks());
    assert_eq!(limiter.expire_at(&log), (T0 + ms(1_500)).ceil_millis());
    let (verdict, _) = limiter.apply(&mut log, T0, 1);
    assert!(verdict.limited);
    assert_eq!(log.len(), 1);
}

#[test]
fn serialized_entries_round_trip_and_are_checked() {
    let limiter = limiter(5_000, 1_000);
    let mut log = SlidingLog::default();
    for (i, quantity) in [1, 1, 7, 2_000].into_iter().enumerate() {
        limiter.apply(&mut log, T0 + Micros::saturating(i as i64), quantity);
    }
    let mut bytes = Vec::new();
    log.serialize(0, log.len(), &mut bytes);
    assert_eq!(bytes.len(), log.len() * ENTRY_LEN);
    let mut copy = SlidingLog::default();
    copy.append_serialized(&bytes[..16]).unwrap();
    copy.append_serialized(&bytes[16..]).unwrap();
    assert_eq!(copy, log);
    let mut chunked = Vec::new();
    log.serialize(2, 100, &mut chunked);
    assert_eq!(chunked, bytes[16..]);
    // Not whole entries, or going back in time: refused, nothing appended.
    assert_eq!(copy.append_serialized(&bytes[..7]), None);
    assert_eq!(copy.append_serialized(&bytes[..8]), None);
    assert_eq!(copy, log);
}

#[test]
fn refuses_parameters_it_cannot_honour() {
    assert_eq!(
        LogLimiter::new(0, 1, Unit::Seconds),
        Err(ParamError::NonPositiveLimit)
    );
    // A request may take up to quantity / 1024 entries: the limit bounds each call's work.
    assert!(LogLimiter::new(MAX_LOG_LIMIT as i64, 1, Unit::Seconds).is_ok());
    assert_eq!(
        LogLimiter::new(MAX_LOG_LIMIT as i64 + 1, 1, Unit::Seconds),
        Err(ParamError::LimitTooHighForLog)
    );
    assert_eq!(
        LogLimiter::new(i64::MAX, 1, Unit::Seconds),
        Err(ParamError::LimitTooHighForLog)
    );
    assert_eq!(
        LogLimiter::new(1, 0, Unit::Seconds),
        Err(ParamError::NonPositiveWindow)
    );
    assert_eq!(
        LogLimiter::new(1, i64::MAX, Unit::Seconds),
        Err(ParamError::WindowTooLong)
    );
}

// --- Properties -------------------------------------------------------------------------

/// The log kept the obvious way: every admitted unit with its time, nothing ever merged.
struct Model {
    window: i64,
    units: Vec<i64>,
}

impl Model {
    fn live(&self, now: i64) -> Vec<i64> {
        self.units
            .iter()
            .copied()
            .filter(|&time| time + self.window > now)
            .collect()
    }

    /// The reply in microseconds, and the model updated as the command would.
    fn call(&mut self, limit: u64, now: i64, quantity: u64) -> [i64; 5] {
        let writes = quantity > 0 && quantity <= limit;
        let mut live = self.live(now);
        if writes && live.len() as u64 > limit {
            live.drain(..live.len() - limit as usize);
            self.units = live.clone();
        }
        let used = live.len() as u64;
        let admitted = quantity <= limit && used + quantity <= limit;
        let newest = self.units.last().copied();
        let retry = if !admitted && quantity <= limit {
            // The (used + quantity - limit)-th oldest live unit leaving makes room.
            live[(used + quantity - limit - 1) as usize] + self.window - now
        } else {
            -1
        };
        let reset = if admitted && quantity > 0 {
            newest.map_or(now, |newest| newest.max(now)) + self.window - now
        } else if used > 0 {
            newest.unwrap() + self.window - now
        } else {
            0
        };
        if admitted && quantity > 0 {
            let time = newest.map_or(now, |newest| newest.max(now));
            self.units = live;
            self.units
                .extend(std::iter::repeat_n(time, quantity as usize));
        }
        let charged = if admitted { quantity } else { 0 };
        [
            i64::from(!admitted),
            limit as i64,
            limit.saturating_sub(used + charged) as i64,
            retry,
            reset,
        ]
    }
}

/// (microseconds since the previous call, quantity, limit) for each call.
fn stream() -> impl Strategy<Value = (i64, Vec<(i64, u64, u64)>)> {
    (1i64..3_000).prop_flat_map(|window| {
        let calls = prop::collection::vec((0..window / 2 + 2, 0u64..12, 1u64..10), 1..120);
        (Just(window), calls)
    })
}

proptest! {
    #[test]
    fn replies_match_the_brute_force_log((window, calls) in stream()) {
        let mut model = Model { window, units: Vec::new() };
        let mut log = SlidingLog::default();
        let mut now = T0.get();
        for (step, quantity, limit) in calls {
            now += step;
            let limiter = LogLimiter::new(limit as i64, window, Unit::Microseconds).unwrap();
            let (verdict, _) = call(&limiter, &mut log, Micros::saturating(now), quantity);
            let expected = model.call(limit, now, quantity);
            prop_assert_eq!(verdict.to_reply(Unit::Microseconds, Rounding::Up), expected);
            prop_assert!(log.len() as u64 <= limit.max(model.units.len() as u64));
            prop_assert_eq!(log.total(), model.units.len() as u64);
        }
    }

    #[test]
    fn never_admits_more_than_the_limit_in_any_window(
        (window, calls) in stream(),
        limit in 1u64..10,
    ) {
        let limiter = LogLimiter::new(limit as i64, window, Unit::Microseconds).unwrap();
        let mut log = SlidingLog::default();
        let mut admitted = Vec::new();
        let mut now = T0.get();
        for (step, quantity, _) in calls {
            now += step;
            if !call(&limiter, &mut log, Micros::saturating(now), quantity).0.limited && quantity > 0 {
                admitted.push((now, quantity));
                // An admitted request leaves no expired entry in front: each entry is
                // dropped once, which is what makes a call O(1) amortised.
                let oldest = entry_time(log.entries().next().unwrap());
                prop_assert!(oldest + window > now);
            }
            prop_assert!(log.len() as u64 <= limit);
        }
        for &(t, _) in &admitted {
            let in_window: u64 = admitted.iter()
                .filter(|&&(u, _)| u > t - window && u <= t)
                .map(|&(_, q)| q).sum();
            prop_assert!(in_window <= limit);
        }
    }

    #[test]
    fn waiting_retry_after_is_exactly_enough((window, calls) in stream(), limit in 1u64..10) {
        let limiter = LogLimiter::new(limit as i64, window, Unit::Microseconds).unwrap();
        let mut log = SlidingLog::default();
        let mut now = T0.get();
        for (step, quantity, _) in calls {
            now += step;
            let (verdict, _) = call(&limiter, &mut log, Micros::saturating(now), quantity);
            let Some(retry) = verdict.retry_after.get() else { continue };
            let wait = retry.ceil_micros().get();
            prop_assert!(wait > 0);
            prop_assert!(!limiter.inspect(Some(&log), Micros::saturating(now + wait), quantity).limited);
            prop_assert!(limiter.inspect(Some(&log), Micros::saturating(now + wait - 1), quantity).limited);
        }
    }

    #[test]
    fn any_clock_gives_a_sane_reply_and_an_ordered_log(
        (window, calls) in stream(),
        jumps in prop::collection::vec(-10_000i64..10_000, 120),
    ) {
        let mut log = SlidingLog::default();
        let mut now = T0.get();
        for ((_, quantity, limit), jump) in calls.into_iter().zip(jumps) {
            now += jump;
            let limiter = LogLimiter::new(limit as i64, window, Unit::Microseconds).unwrap();
            let (verdict, _) = call(&limiter, &mut log, Micros::saturating(now), quantity);
            let reply = verdict.to_reply(Unit::Microseconds, Rounding::Up);
            prop_assert!(reply[2] >= 0 && reply[2] <= reply[1]);
            prop_assert!(reply[3] >= -1 && reply[4] >= 0);
            prop_assert!(log.entries().zip(log.entries().skip(1))
                .all(|(a, b)| entry_time(a) <= entry_time(b)));
            if !log.is_empty() {
                prop_assert!(limiter.expire_at(&log).get() * 1_000 >= entry_time(log.entries().next_back().unwrap()));
            }
        }
    }
}

#[test]
fn counts_give_the_units_and_when_the_oldest_and_newest_leave() {
    let limiter = limiter(10, 1_000);
    assert_eq!(limiter.counts(None, T0), (0, T0, T0));
    let mut log = SlidingLog::default();
    call(&limiter, &mut log, T0, 3);
    call(&limiter, &mut log, T0 + ms(400), 2);
    assert_eq!(
        limiter.counts(Some(&log), T0 + ms(500)),
        (5, T0 + ms(1_000), T0 + ms(1_400))
    );
    // Once the first entry has left, the second is the oldest.
    assert_eq!(
        limiter.counts(Some(&log), T0 + ms(1_000)),
        (2, T0 + ms(1_400), T0 + ms(1_400))
    );
}
