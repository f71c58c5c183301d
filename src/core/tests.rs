//! Properties every limiter shares, along clocks that misbehave: random request streams
//! where the clock mostly moves forward, sometimes steps back (an NTP correction) and
//! sometimes jumps far ahead. For each algorithm:
//!
//! - no panic, every reply in range, and every write expires after the call's own time
//!   (never a TTL of zero or less);
//! - a peek never changes the state;
//! - a clock stepped back never admits extra: the documented bound holds over the real time
//!   that passed (the forward steps only; a step back is a correction, not time running
//!   backwards), since a limiter never sees more time pass than really did;
//! - a jump past the state's reset starts over cleanly: the reply and the written state are
//!   those of a limiter that never saw a request.

use proptest::prelude::*;

use super::engine::memory::Value;
use super::gcra::Gcra;
use super::limiter::Limiter;
use super::log::{LogLimiter, SlidingLog};
use super::ring::Native;
use super::testing::{take, Key};
use super::time::{Micros, Rounding, Unit};
use super::verdict::Verdict;
use super::windows::{Algorithm, WindowLimiter};

/// 2023-11-14T22:13:20Z, in microseconds.
const T0: i64 = 1_700_000_000_000_000;

/// One limiter of any algorithm on its key, called through the engine along a controlled
/// clock (µs).
#[derive(Clone)]
struct Subject {
    key: Key,
}

/// What one call did.
struct Call {
    verdict: Verdict,
    /// The expiry (Unix ms) of the state it wrote, if it wrote one.
    wrote: Option<i64>,
}

impl Subject {
    /// A fresh limiter: `limit` per `window` µs, in the shape `kind` picks.
    fn new(kind: u8, limit: u64, window: i64) -> Subject {
        let limit = limit as i64;
        let limiter = match kind {
            0 => {
                Limiter::Throttle(Gcra::new(limit - 1, limit, window, Unit::Microseconds).unwrap())
            }
            1..=3 => {
                let algorithm = match kind {
                    1 => Algorithm::Fixed,
                    2 => Algorithm::Sliding,
                    _ => Algorithm::Buckets(6),
                };
                Limiter::Window(
                    WindowLimiter::new(limit, window, Unit::Microseconds, algorithm).unwrap(),
                )
            }
            _ => Limiter::Log(LogLimiter::new(limit, window, Unit::Microseconds).unwrap()),
        };
        Subject {
            key: Key::new(limiter),
        }
    }

    /// The same limiter, without state.
    fn fresh(&self) -> Subject {
        Subject {
            key: Key::new(self.key.limiter),
        }
    }

    /// A request of `quantity` at `now`, made as the command makes it.
    fn call(&mut self, now: i64, quantity: u64) -> Call {
        let before = self.key.stored();
        let verdict = self.key.call(Micros::saturating(now), take(quantity));
        let after = self.key.stored();
        Call {
            verdict,
            wrote: after
                .filter(|entry| Some(entry) != before.as_ref())
                .map(|entry| entry.expire_at.get()),
        }
    }

    /// The state, comparable between two limiters (a log's entries, whatever its ring's
    /// capacity).
    fn state(&self) -> Vec<u64> {
        match self.key.stored().map(|entry| entry.value) {
            None => vec![],
            Some(Value::String(bytes)) => bytes.into_iter().map(u64::from).collect(),
            Some(Value::Native(words)) => {
                let log = SlidingLog::from_words(words);
                let mut bytes = Vec::new();
                log.serialize(0, log.len(), &mut bytes);
                bytes.into_iter().map(u64::from).collect()
            }
        }
    }

    /// The most the limiter may admit in any real interval shorter than `span` µs, for
    /// `window` µs and `limit`: GCRA's bucket plus what drips in during the span; exactly
    /// the limit for the log; twice the limit for the window counters (the worst case of a
    /// boundary, documented for FIXED and SLIDING, and one bucket's worth at most for
    /// BUCKETS).
    fn bound(&self, limit: u64, window: i64, span: i64) -> u64 {
        match self.key.limiter {
            // Bucket `limit` (max_burst + 1), refilled one per window / limit.
            Limiter::Throttle(_) => limit + (span as u128 * limit as u128 / window as u128) as u64,
            Limiter::Window(_) => 2 * limit,
            Limiter::Log(_) | Limiter::Lease(_) | Limiter::Load(_) => limit,
        }
    }
}

/// A clock step in µs: mostly forward within a window, sometimes back by up to three
/// windows, sometimes far ahead.
fn steps(window: i64) -> impl Strategy<Value = i64> {
    prop_oneof![
        8 => 0..window / 3 + 2,
        2 => -3 * window..0,
        1 => Just(0),
    ]
}

fn setup() -> impl Strategy<Value = (u8, u64, i64, Vec<(i64, u64)>)> {
    (
        0u8..5,
        1u64..8,
        prop_oneof![Just(1_000_000i64), 60i64..5_000],
    )
        .prop_flat_map(|(kind, limit, window)| {
            let calls = prop::collection::vec((steps(window), 0..=limit + 1), 1..100);
            (Just(kind), Just(limit), Just(window), calls)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_misbehaving_clock_never_breaks_a_limiter((kind, limit, window, calls) in setup()) {
        let mut subject = Subject::new(kind, limit, window);
        // Real time: the forward steps only.
        let (mut now, mut real) = (T0, 0i64);
        let mut admitted: Vec<(i64, u64)> = Vec::new();
        for (step, quantity) in calls {
            now += step;
            real += step.max(0);

            // A peek first: it changes nothing.
            let before = subject.state();
            let peek = subject.call(now, 0);
            prop_assert_eq!(peek.wrote, None);
            prop_assert_eq!(subject.state(), before);

            let call = subject.call(now, quantity);
            let reply = call.verdict.to_reply(Unit::Microseconds, Rounding::Up);
            prop_assert!(reply[0] == 0 || reply[0] == 1);
            prop_assert!(reply[2] >= 0 && reply[2] <= reply[1], "{:?}", reply);
            prop_assert!(reply[3] >= -1 && reply[4] >= 0, "{:?}", reply);
            if let Some(expire_at_ms) = call.wrote {
                prop_assert!(expire_at_ms * 1_000 > now, "expires at {} ms, now {} µs", expire_at_ms, now);
            }
            if !call.verdict.limited && quantity > 0 {
                admitted.push((real, quantity));
            }
        }
        for (i, &(start, _)) in admitted.iter().enumerate() {
            let mut total = 0;
            for &(at, quantity) in &admitted[i..] {
                total += quantity;
                if at - start < window {
                    let bound = subject.bound(limit, window, at - start);
                    prop_assert!(total <= bound, "{} admitted in {} µs, bound {}", total, at - start, bound);
                }
            }
        }
    }

    #[test]
    fn a_jump_past_the_reset_starts_over((kind, limit, window, calls) in setup(), quantity in 0u64..10, years in 0i64..200) {
        let mut subject = Subject::new(kind, limit, window);
        let mut now = T0;
        for (step, quantity) in calls {
            now += step;
            subject.call(now, quantity);
        }
        // Past any state's reset: the furthest of its expiry and the last call plus two
        // windows, then up to 200 years more.
        let reset = subject.call(now, 0).verdict.reset_after.ceil_micros().get();
        let later = now + reset + 2 * window + years * 365 * 86_400 * 1_000_000;
        let mut fresh = subject.fresh();
        let (call, expected) = (subject.call(later, quantity), fresh.call(later, quantity));
        prop_assert_eq!(call.verdict, expected.verdict);
        prop_assert_eq!(call.wrote, expected.wrote);
        if call.wrote.is_some() {
            prop_assert_eq!(subject.state(), fresh.state());
        }
    }
}
