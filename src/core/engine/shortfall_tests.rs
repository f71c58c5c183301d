//! What a take that does not fit now does (`DELAY`, `AT_MOST`, `FORCE`), through the engine on
//! the in-memory store: exact replies for every algorithm, and property tests against
//! brute-force models of what each limit means.

use proptest::prelude::*;

use super::memory::Memory;
use super::{Call, Limiter, Micros, Request, Settled, Shortfall, Verdict};
use crate::core::gcra::Gcra;
use crate::core::testing::{every_algorithm, ms, refund, take, Key, T0};
use crate::core::time::Ticks;
use crate::core::time::{Rounding, Unit};
use crate::core::windows::{Algorithm, WindowLimiter};

fn delay(quantity: u64, max_wait_ms: i64) -> Request {
    Request {
        shortfall: Shortfall::Delay(ms(max_wait_ms)),
        ..take(quantity)
    }
}

fn at_most(quantity: u64) -> Request {
    Request {
        shortfall: Shortfall::AtMost,
        ..take(quantity)
    }
}

fn force(quantity: u64) -> Request {
    Request {
        shortfall: Shortfall::Force,
        ..take(quantity)
    }
}

/// `every_algorithm()`'s names, in its order.
const NAMES: [&str; 5] = ["GCRA", "FIXED", "SLIDING", "BUCKETS 4", "LOG"];

/// Replies in milliseconds, with the wait or the quantity granted.
fn reply(key: &mut Key, now: Micros, request: Request) -> ([i64; 5], Settled) {
    let (verdict, settled) = key.settle(now, request, true);
    (verdict.to_reply(Unit::Milliseconds, Rounding::Up), settled)
}

fn wait_ms(settled: &Settled) -> i64 {
    settled.wait.get() / 1_000
}

#[test]
fn a_full_limiter_schedules_the_next_request_when_it_fits() {
    // Every algorithm at 5 per second, full at T0: the next request fits when the first
    // units leave (GCRA: one interval, 200 ms; the windows and the log: the next window,
    // except SLIDING, whose previous window still weighs until 200 ms into the next).
    let expected_wait = [200, 1_000, 1_200, 1_000, 1_000];
    for ((limiter, name), wait) in every_algorithm().into_iter().zip(NAMES).zip(expected_wait) {
        let mut key = Key::new(limiter);
        key.call(T0, take(5));
        let (fields, settled) = reply(&mut key, T0, delay(1, 2_000));
        assert_eq!((fields[0], fields[2], fields[3]), (0, 0, -1), "{name}");
        assert_eq!(wait_ms(&settled), wait, "{name}");
        assert_eq!(settled.granted, 1, "{name}");
        // A plain call meanwhile waits for the scheduled one: first come, first served.
        let plain = key.dry(T0 + ms(1), take(1));
        assert!(plain.limited, "{name}");
        assert!(
            plain.retry_after.get().unwrap() >= ms(wait - 1).ticks(),
            "{name}"
        );
    }
}

#[test]
fn gcra_delays_queue_at_the_rate() {
    let mut key = Key::new(every_algorithm()[0]);
    key.call(T0, take(5));
    // Each delayed request goes one interval after the one before.
    for (number, expected) in [(1, 200), (2, 400), (3, 600)] {
        let (fields, settled) = reply(&mut key, T0, delay(1, 1_000));
        assert_eq!(fields, [0, 5, 0, -1, 1_000 + expected], "request {number}");
        assert_eq!(wait_ms(&settled), expected, "request {number}");
    }
    // A plain call is refused until the queue has gone and one more interval.
    assert_eq!(key.reply(T0, take(1)), [1, 5, 0, 800, 1_600]);
}

#[test]
fn a_wait_longer_than_allowed_is_refused_with_the_time_it_would_be_admitted() {
    for (limiter, name) in every_algorithm().into_iter().zip(NAMES) {
        let mut key = Key::new(limiter);
        key.call(T0, take(5));
        let fits_in = key
            .dry(T0, take(1))
            .retry_after
            .get()
            .unwrap()
            .ceil_micros();
        let max_wait = ms(100);
        let (verdict, settled) = key.settle(T0, delay(1, 100), true);
        assert!(verdict.limited, "{name}");
        assert_eq!(settled, Settled::default(), "{name}");
        let retry = verdict.retry_after.get().unwrap().ceil_micros();
        assert_eq!(retry, fits_in - max_wait, "{name}");
        // Nothing was charged, and the same call then is admitted, a microsecond before not.
        assert!(!key.dry(T0 + retry, delay(1, 100)).limited, "{name}");
        assert!(
            key.dry(T0 + retry - Micros::saturating(1), delay(1, 100))
                .limited,
            "{name}"
        );
    }
}

#[test]
fn a_request_that_never_fits_is_refused_whatever_it_may_wait() {
    for (limiter, name) in every_algorithm().into_iter().zip(NAMES) {
        let mut key = Key::new(limiter);
        let (verdict, settled) = key.settle(T0, delay(6, 1_000_000), true);
        assert!(verdict.limited && verdict.retry_after.is_none(), "{name}");
        assert_eq!(settled.granted, 0, "{name}");
        assert_eq!(key.stored(), None, "{name}");
    }
}

#[test]
fn at_most_takes_what_fits_and_says_how_much() {
    for (limiter, name) in every_algorithm().into_iter().zip(NAMES) {
        let mut key = Key::new(limiter);
        let (fields, settled) = reply(&mut key, T0, at_most(3));
        assert_eq!((fields[0], fields[2], settled.granted), (0, 2, 3), "{name}");
        let (fields, settled) = reply(&mut key, T0, at_most(3));
        assert_eq!((fields[0], fields[2], settled.granted), (0, 0, 2), "{name}");
        // Nothing fits: refused as a request of 1 would be.
        let alone = key.dry(T0, take(1));
        let (verdict, settled) = key.settle(T0, at_most(3), true);
        assert_eq!((verdict, settled.granted), (alone, 0), "{name}");
        // More than the limit: what fits, not a refusal.
        let mut key = Key::new(limiter);
        let (_, settled) = reply(&mut key, T0, at_most(100));
        assert_eq!(settled.granted, 5, "{name}");
    }
}

#[test]
fn force_admits_everything_and_later_requests_wait_out_the_debt() {
    // 12 units at 5 per second, on an empty limiter: 5 now, the rest forced. GCRA repays at
    // its rate (12 intervals from T0 and one more, less its burst of 5: T0 + 1.6 s); the
    // fixed windows and the log take 5 a window (5, 5, 2: free again two windows on, with
    // room for 3); SLIDING's next 5 wait for a window with nothing before it (T0 + 2 s), the
    // last 2 for the previous 5 to weigh no more than 3 (T0 + 3.4 s), and a request after
    // them for those 5 to weigh no more than 2 (T0 + 3.6 s).
    let next_admitted = [1_600, 2_000, 3_600, 2_000, 2_000];
    for ((limiter, name), at) in every_algorithm().into_iter().zip(NAMES).zip(next_admitted) {
        let mut key = Key::new(limiter);
        let (fields, settled) = reply(&mut key, T0, force(12));
        assert_eq!((fields[0], fields[2], fields[3]), (0, 0, -1), "{name}");
        assert!(settled.forced && settled.granted == 12, "{name}");
        let refused = key.dry(T0 + ms(10), take(1));
        assert!(refused.limited, "{name}");
        let retry = refused.retry_after.get().unwrap().ceil_micros();
        assert_eq!(T0 + ms(10) + retry, T0 + ms(at), "{name}");
        assert!(!key.dry(T0 + ms(at), take(1)).limited, "{name}");
    }
}

#[test]
fn force_within_what_fits_is_a_plain_take() {
    for (limiter, name) in every_algorithm().into_iter().zip(NAMES) {
        let mut plain = Key::new(limiter);
        let mut forced = Key::new(limiter);
        assert_eq!(plain.call(T0, take(3)), forced.call(T0, force(3)), "{name}");
        assert_eq!(plain.stored(), forced.stored(), "{name}");
    }
}

#[test]
fn a_refund_gives_a_scheduled_slot_back() {
    for (limiter, name) in every_algorithm().into_iter().zip(NAMES) {
        let mut key = Key::new(limiter);
        key.call(T0, take(5));
        let (_, first) = key.settle(T0, delay(1, 5_000), true);
        key.call(T0, refund(1));
        // The slot given back is the next one's.
        let (_, second) = key.settle(T0, delay(1, 5_000), true);
        assert_eq!(second.wait, first.wait, "{name}");
    }
}

/// A call over several keys of one store.
fn run_all(
    memory: &Memory,
    names: &[&str],
    limiters: &[Limiter],
    now: Micros,
    request: Request,
    write: bool,
) -> (Vec<Verdict>, Settled) {
    let call = Call {
        limiters,
        request,
        now,
        write,
        seed: now.get() as u64,
    };
    memory.run_settled(names, &call).unwrap()
}

/// A limiter of any algorithm, from a seed: `limit` per `window_ms`.
fn limiter_of(kind: u8, limit: u64, window_ms: i64) -> Limiter {
    let window = |algorithm| {
        Limiter::Window(
            WindowLimiter::new(limit as i64, window_ms, Unit::Milliseconds, algorithm).unwrap(),
        )
    };
    match kind % 6 {
        0 => Limiter::Throttle(
            Gcra::new(
                limit as i64 - 1,
                limit as i64,
                window_ms,
                Unit::Milliseconds,
            )
            .unwrap(),
        ),
        1 => window(Algorithm::Fixed),
        2 => window(Algorithm::Sliding),
        3 => window(Algorithm::Buckets(4)),
        5 => window(Algorithm::Anchored),
        _ => Limiter::Log(
            crate::core::log::LogLimiter::new(limit as i64, window_ms, Unit::Milliseconds).unwrap(),
        ),
    }
}

/// Calls: a gap in milliseconds, a quantity, and what it does when it does not fit (0:
/// refused, 1: `DELAY` up to 3 s, 2: `AT_MOST`, 3: `FORCE`).
fn calls() -> impl Strategy<Value = Vec<(i64, u64, u8)>> {
    prop::collection::vec((0i64..400, 1u64..4, 0u8..4), 1..40)
}

fn request_of(quantity: u64, option: u8) -> Request {
    match option {
        1 => delay(quantity, 3_000),
        2 => at_most(quantity),
        3 => force(quantity),
        _ => take(quantity),
    }
}

/// The most a limiter of `limit` per `window` may have let through in the window ending at
/// `at` (exclusive end `at + 1`), given every admitted unit with the time it went ahead:
/// what each algorithm promises. GCRA: `limit` plus one unit per interval of the span
/// looked at, over every span ending at `at`.
fn within_limit(kind: u8, limit: u64, window: i64, went: &[(i64, u64)], at: i64) -> bool {
    let sum = |from: i64, to: i64| -> u64 {
        went.iter()
            .filter(|&&(time, _)| time >= from && time <= to)
            .map(|&(_, quantity)| quantity)
            .sum()
    };
    match kind % 6 {
        0 => went
            .iter()
            .filter(|&&(start, _)| start <= at)
            .all(|&(start, _)| {
                // Units in [start, at] at most limit + (at - start) / interval (rounded down).
                let interval = window as f64 / limit as f64;
                sum(start, at) as f64 <= limit as f64 + ((at - start) as f64 / interval).floor()
            }),
        1 => {
            let start = at - at.rem_euclid(window);
            sum(start, start + window - 1) <= limit
        }
        2 => {
            // The sliding counter's own promise: the previous window weighted by its
            // overlap, plus the current one.
            let start = at - at.rem_euclid(window);
            let previous = sum(start - window, start - 1) as i128;
            let current = sum(start, at) as i128;
            let overlap = (window - (at - start)) as i128;
            previous * overlap + current * window as i128 <= limit as i128 * window as i128
        }
        3 => {
            let bucket = window / 4;
            let first = at - at.rem_euclid(bucket) - 3 * bucket;
            sum(first, at) <= limit
        }
        5 => {
            // ANCHORED: a window starts with the first unit that went after the previous one
            // ended.
            let mut times: Vec<i64> = went
                .iter()
                .map(|&(time, _)| time)
                .filter(|&time| time <= at)
                .collect();
            times.sort_unstable();
            let mut start = i64::MIN;
            for time in times {
                if time >= start.saturating_add(window) {
                    start = time;
                }
            }
            sum(start, at) <= limit
        }
        _ => sum(at - window + 1, at) <= limit,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every caller that waits what it is told goes ahead in turn (first come, first served)
    /// and no limiter ever lets more through than it promises, whatever mix of plain,
    /// delayed, partial and forced calls comes; a forced call's later parts count from
    /// when they fit. Checked against the units each call let through, at its time.
    #[test]
    fn no_limit_is_exceeded_when_every_caller_goes_at_its_time(
        kind in 0u8..6,
        limit in 2u64..8,
        window_ms in 200i64..2_000,
        stream in calls(),
    ) {
        let limiter = limiter_of(kind, limit, window_ms);
        let mut key = Key::new(limiter);
        let window = window_ms * 1_000;
        let mut now = T0;
        let mut went: Vec<(i64, u64)> = Vec::new();
        let mut last_scheduled = 0;
        for (gap, quantity, option) in stream {
            now = now + ms(gap);
            let (verdict, settled) = key.settle(now, request_of(quantity, option), true);
            if verdict.limited {
                prop_assert_eq!(settled.granted, 0);
                continue;
            }
            if settled.forced {
                // Its parts are the limiter's business; the calls after it must fit around
                // them, which the brute-force check cannot see: start over from here.
                went.clear();
                last_scheduled = 0;
                key = Key::new(limiter);
                continue;
            }
            let at = (now + settled.wait).get();
            prop_assert!(at >= last_scheduled, "overtaken: {} before {}", at, last_scheduled);
            last_scheduled = at;
            if option == 2 {
                prop_assert!(settled.granted >= 1 && settled.granted <= quantity);
            } else {
                prop_assert_eq!(settled.granted, quantity);
            }
            went.push((at, settled.granted));
            for &(time, _) in &went {
                prop_assert!(within_limit(kind, limit, window, &went, time),
                    "over the limit at {} with {:?}", time - T0.get(), went);
            }
        }
    }

    /// DELAY on GCRA is a queue at the rate: each request goes at the earliest time that
    /// keeps every run of requests within the burst plus the rate (a brute-force search
    /// over all earlier requests, without the TAT), after the one before it.
    #[test]
    fn gcra_delay_is_a_queue_at_the_rate(
        max_burst in 0i64..5,
        interval_ms in 1i64..500,
        stream in prop::collection::vec((0i64..300, 1u64..4, 0i64..3_000), 1..30),
    ) {
        let limit = max_burst + 1;
        let gcra = Gcra::new(max_burst, 1, interval_ms, Unit::Milliseconds).unwrap();
        let mut key = Key::new(Limiter::Throttle(gcra));
        let interval = ms(interval_ms).ticks();
        let tolerance = Ticks::saturating(interval.get() * limit as i128);
        let mut now = T0;
        let mut gone: Vec<(Ticks, u64)> = Vec::new();
        for (gap, quantity, max_wait) in stream {
            now = now + ms(gap);
            let (verdict, settled) = key.settle(now, delay(quantity, max_wait), true);
            let Some(earliest) = (quantity <= limit as u64).then(|| {
                // The least t at or after now and the last request such that every run from
                // an earlier request to this one fits: sum of intervals <= t - start + tau.
                let mut t = now.ticks();
                if let Some(&(last, _)) = gone.last() {
                    t = t.max(last);
                }
                let mut units = quantity;
                for &(start, earlier) in gone.iter().rev() {
                    units += earlier;
                    t = t.max(start + Ticks::saturating(interval.get() * units as i128) - tolerance);
                }
                t.max(now.ticks() + Ticks::saturating(interval.get() * quantity as i128) - tolerance)
            }) else {
                prop_assert!(verdict.limited && verdict.retry_after.is_none());
                continue;
            };
            let wait = (earliest - now.ticks()).ceil_micros();
            if wait > ms(max_wait) {
                prop_assert!(verdict.limited);
                prop_assert_eq!(verdict.retry_after.get().map(Ticks::ceil_micros), Some(wait - ms(max_wait)));
            } else {
                prop_assert!(!verdict.limited);
                prop_assert_eq!(settled.wait, wait);
                gone.push(((now + wait).ticks(), quantity));
            }
        }
    }

    /// A partial grant is what a plain request could have taken then: the most that fits,
    /// never more.
    #[test]
    fn a_partial_grant_is_what_fits(
        kind in 0u8..6,
        limit in 1u64..8,
        stream in calls(),
        quantity in 1u64..12,
    ) {
        let limiter = limiter_of(kind, limit, 1_000);
        let mut key = Key::new(limiter);
        let mut now = T0;
        for (gap, taken, _) in stream {
            now = now + ms(gap);
            key.call(now, take(taken));
        }
        let fits = (1..=quantity).rev().find(|&part| !key.dry(now, take(part)).limited);
        let (verdict, settled) = key.settle(now, at_most(quantity), true);
        match fits {
            Some(part) => {
                prop_assert!(!verdict.limited);
                prop_assert_eq!(settled.granted, part);
            }
            None => {
                prop_assert!(verdict.limited);
                prop_assert_eq!(settled.granted, 0);
            }
        }
    }

    /// Debt is repaid at the rate: after a FORCE on an empty limiter, a client asking for
    /// one unit every few milliseconds gets no more than what the limiter lets through from
    /// empty less the forced units (GCRA: its burst plus one an interval; a window limiter:
    /// its limit for each window begun).
    #[test]
    fn debt_is_repaid_at_the_rate(
        kind in 0u8..6,
        limit in 1u64..8,
        debt in 1u64..40,
        step_ms in 10i64..60,
    ) {
        let quantity = debt.min(limit * 16);
        let limiter = limiter_of(kind, limit, 1_000);
        let mut key = Key::new(limiter);
        let (verdict, settled) = key.settle(T0, force(quantity), true);
        prop_assert!(!verdict.limited);
        prop_assert_eq!(settled.granted, quantity);
        let mut later = 0;
        let mut now = T0;
        // SLIDING with a limit of 1 lets one through every other window, whatever the debt.
        let seconds = 2 * (quantity.div_ceil(limit) as i64 + 2);
        for _ in 0..(seconds * 1_000 / step_ms) {
            now = now + ms(step_ms);
            if !key.call(now, take(1)).limited {
                later += 1;
            }
            // What the limiter lets through from empty by now, the forced units first.
            let elapsed = (now - T0).get();
            let capacity = match kind % 6 {
                0 => limit + (elapsed * limit as i64 / 1_000_000) as u64,
                _ => limit * (elapsed / 1_000_000 + 1) as u64,
            };
            prop_assert!(later <= capacity.saturating_sub(quantity),
                "{} units after the debt by {} µs", later, elapsed);
        }
        // And it is repaid: within twice the windows the debt and the limit fill, requests go
        // through again.
        prop_assert!(later > 0);
    }

    /// RL.ALL over mixed limiters: a delayed call waits for the last of them, a partial one
    /// takes what the tightest admits, a forced one charges each as FORCE alone would.
    #[test]
    fn several_limiters_settle_each_option_together(
        kinds in prop::collection::vec(0u8..6, 2..4),
        limits in prop::collection::vec(2u64..6, 4),
        stream in calls(),
        quantity in 1u64..5,
        option in 1u8..4,
    ) {
        let limiters: Vec<Limiter> = kinds
            .iter()
            .zip(&limits)
            .enumerate()
            .map(|(index, (&kind, &limit))| limiter_of(kind, limit, 500 * (index as i64 + 1)))
            .collect();
        let names = &["k0", "k1", "k2", "k3"][..limiters.len()];
        let memory = Memory::new();
        let mut now = T0;
        for (gap, taken, _) in stream {
            now = now + ms(gap);
            run_all(&memory, names, &limiters, now, take(taken), true);
        }
        let request = request_of(quantity, option);
        let alone: Vec<(Verdict, Settled)> = limiters
            .iter()
            .zip(names)
            .map(|(limiter, name)| {
                let (verdicts, settled) = run_all(
                    &memory, &[*name], std::slice::from_ref(limiter), now, request, false);
                (verdicts[0], settled)
            })
            .collect();
        let (verdicts, settled) = run_all(&memory, names, &limiters, now, request, false);
        let limited = verdicts.iter().any(|verdict| verdict.limited);
        match option {
            1 => {
                let waits: Option<Vec<Micros>> = alone
                    .iter()
                    .map(|(verdict, settled)| (!verdict.limited).then_some(settled.wait))
                    .collect();
                if let Some(waits) = waits {
                    // Each fits from its own time on: together, from the latest.
                    let latest = waits.into_iter().max().unwrap();
                    prop_assert!(!limited);
                    prop_assert_eq!(settled.wait, latest);
                } else {
                    prop_assert!(limited);
                }
            }
            2 => {
                let least = alone.iter().map(|(_, settled)| settled.granted).min().unwrap();
                prop_assert_eq!(settled.granted, least);
                prop_assert_eq!(limited, least == 0);
            }
            _ => {
                prop_assert!(!limited);
                prop_assert_eq!(settled.granted, quantity);
                prop_assert_eq!(settled.forced, alone.iter().any(|(_, settled)| settled.forced));
            }
        }
    }
}
