use super::window_limiter::*;
use super::*;
use crate::core::params::ParamError;
use crate::core::time::Unit;
use crate::core::time::{Micros, Rounding, Ticks};
use proptest::prelude::*;

/// 2023-11-14T22:13:20Z: a multiple of every window used here.
const T0: i64 = 1_700_000_000_000_000;

fn ms(millis: i64) -> i64 {
    millis * 1_000
}

/// A limiter and its key, driven by a controlled clock.
struct Key {
    limiter: WindowLimiter,
    value: Option<Vec<u8>>,
    expire_at_ms: Option<i64>,
    scratch: Scratch,
}

impl Key {
    fn new(limit: i64, window_ms: i64, algorithm: Algorithm) -> Key {
        Key::with(WindowLimiter::new(limit, window_ms, Unit::Milliseconds, algorithm).unwrap())
    }

    fn with(limiter: WindowLimiter) -> Key {
        Key {
            limiter,
            value: None,
            expire_at_ms: None,
            scratch: Scratch::default(),
        }
    }

    fn outcome(&mut self, now: i64, quantity: u64) -> WindowOutcome {
        let mut value = Vec::new();
        let outcome = self
            .limiter
            .apply(
                self.value.as_deref(),
                Micros::saturating(now),
                quantity,
                true,
                &mut self.scratch,
                &mut value,
            )
            .unwrap();
        if let Some(expire_at_ms) = outcome.expire_at.map(|at| at.get()) {
            if outcome.placement.expiry_kept {
                assert_eq!(self.expire_at_ms, Some(expire_at_ms), "a kept expiry moved");
            }
            self.value = Some(outcome.placement.place(self.value.as_deref(), &value));
            self.expire_at_ms = Some(expire_at_ms);
        }
        outcome
    }

    /// One call at `now`, replied in milliseconds.
    fn call(&mut self, now: i64, quantity: u64) -> [i64; 5] {
        let verdict = self.outcome(now, quantity).verdict;
        verdict.to_reply(Unit::Milliseconds, Rounding::Up)
    }

    /// How many of `count` requests of 1 at `now` are admitted.
    fn admitted(&mut self, now: i64, count: usize) -> usize {
        (0..count).filter(|_| self.call(now, 1)[0] == 0).count()
    }
}

#[test]
fn fixed_counts_per_aligned_window() {
    let mut key = Key::new(3, 2_000, Algorithm::Fixed);
    let now = T0 + ms(500);
    assert_eq!(key.call(now, 1), [0, 3, 2, -1, 1_500]);
    assert_eq!(key.expire_at_ms, Some((T0 + ms(2_000)) / 1_000));
    assert_eq!(key.call(now, 1), [0, 3, 1, -1, 1_500]);
    assert_eq!(key.call(now + ms(1), 1), [0, 3, 0, -1, 1_499]);
    assert_eq!(key.call(now + ms(2), 1), [1, 3, 0, 1_498, 1_498]);
    assert_eq!(key.call(T0 + ms(1_999), 1), [1, 3, 0, 1, 1]);
    assert_eq!(key.call(T0 + ms(2_000), 2), [0, 3, 1, -1, 2_000]);
    assert_eq!(key.expire_at_ms, Some((T0 + ms(4_000)) / 1_000));
}

#[test]
fn fixed_admits_twice_the_limit_around_a_boundary() {
    let mut key = Key::new(10, 2_000, Algorithm::Fixed);
    assert_eq!(key.admitted(T0 + ms(1_900), 10), 10);
    assert_eq!(key.admitted(T0 + ms(2_100), 10), 10);
}

#[test]
fn sliding_weights_the_previous_window() {
    let mut key = Key::new(10, 2_000, Algorithm::Sliding);
    for remaining in (0..10).rev() {
        assert_eq!(key.call(T0 + ms(1_900), 1), [0, 10, remaining, -1, 2_100]);
    }
    assert_eq!(key.expire_at_ms, Some((T0 + ms(4_000)) / 1_000));
    // 100 ms into the next window, the previous 10 still weigh 9.5: nothing fits until
    // their weight falls to 9, 200 ms in.
    assert_eq!(key.call(T0 + ms(2_100), 1), [1, 10, 0, 100, 1_900]);
    assert_eq!(key.call(T0 + ms(2_199), 1), [1, 10, 0, 1, 1_801]);
    assert_eq!(key.call(T0 + ms(2_200), 1), [0, 10, 0, -1, 3_800]);
    assert_eq!(key.expire_at_ms, Some((T0 + ms(6_000)) / 1_000));
    assert_eq!(key.call(T0 + ms(2_400), 1), [0, 10, 0, -1, 3_600]);
    // 10 * 0.75 + 2 + 1 > 10: fits at 10 * (1 - e/2s) + 3 <= 10, e = 600 ms.
    assert_eq!(key.call(T0 + ms(2_500), 1), [1, 10, 0, 100, 3_500]);
    assert_eq!(key.call(T0 + ms(2_600), 1), [0, 10, 0, -1, 3_400]);
}

#[test]
fn sliding_admits_about_the_limit_around_a_boundary() {
    let mut key = Key::new(10, 2_000, Algorithm::Sliding);
    assert_eq!(key.admitted(T0 + ms(1_900), 10), 10);
    assert_eq!(key.admitted(T0 + ms(2_100), 10), 0);
}

#[test]
fn sliding_waits_for_the_next_window_when_the_current_one_is_full() {
    let mut key = Key::new(4, 1_000, Algorithm::Sliding);
    assert_eq!(key.call(T0 + ms(200), 4), [0, 4, 0, -1, 1_800]);
    // The current 4 become the previous window's: 3 fit once 4 * (1 - e) + 3 <= 4, at
    // e = 750 ms into the next window.
    assert_eq!(key.call(T0 + ms(300), 3), [1, 4, 0, 1_450, 1_700]);
    // The whole limit fits only once the 4 are out of both windows.
    assert_eq!(key.call(T0 + ms(300), 4), [1, 4, 0, 1_700, 1_700]);
    assert_eq!(key.call(T0 + ms(1_750), 3), [0, 4, 0, -1, 1_250]);
}

#[test]
fn buckets_roll_off_one_at_a_time() {
    // 4 buckets of 500 ms.
    let mut key = Key::new(4, 2_000, Algorithm::Buckets(4));
    assert_eq!(key.call(T0 + ms(100), 2), [0, 4, 2, -1, 1_900]);
    assert_eq!(key.call(T0 + ms(600), 2), [0, 4, 0, -1, 1_900]);
    assert_eq!(key.expire_at_ms, Some((T0 + ms(2_500)) / 1_000));
    // The first bucket (2) leaves at 2 s, the second at 2.5 s.
    assert_eq!(key.call(T0 + ms(1_200), 1), [1, 4, 0, 800, 1_300]);
    assert_eq!(key.call(T0 + ms(1_200), 3), [1, 4, 0, 1_300, 1_300]);
    assert_eq!(key.call(T0 + ms(2_000), 2), [0, 4, 0, -1, 2_000]);
    assert_eq!(key.call(T0 + ms(2_000), 3), [1, 4, 0, 2_000, 2_000]);
    assert_eq!(key.call(T0 + ms(2_499), 2), [1, 4, 0, 1, 1_501]);
    assert_eq!(key.call(T0 + ms(2_500), 2), [0, 4, 0, -1, 2_000]);
}

#[test]
fn buckets_admit_about_the_limit_around_a_boundary() {
    let mut key = Key::new(10, 2_000, Algorithm::Buckets(10));
    assert_eq!(key.admitted(T0 + ms(1_900), 10), 10);
    assert_eq!(key.admitted(T0 + ms(2_100), 10), 0);
}

#[test]
fn buckets_need_not_divide_the_window_evenly() {
    // 3 buckets of 1/3 s start at 0, 333,334 and 666,667 us.
    let mut key = Key::new(1, 1_000, Algorithm::Buckets(3));
    let at = |micros| T0 + micros;
    let outcome = key.outcome(at(0), 1);
    assert_eq!(
        outcome.verdict.reset_after,
        Micros::saturating(1_000_000).ticks()
    );
    let outcome = key.outcome(at(333_333), 1);
    assert!(outcome.verdict.limited);
    assert_eq!(
        outcome.verdict.reset_after,
        Micros::saturating(666_667).ticks()
    );
    // A new request, two buckets later, rolls off one window after its bucket's start.
    assert!(!key.outcome(at(1_000_000), 1).verdict.limited);
    let outcome = key.outcome(at(1_333_334), 1);
    assert_eq!(
        outcome.verdict.retry_after,
        Some(Micros::saturating(666_666).ticks())
    );
}

#[test]
fn a_peek_reports_and_writes_nothing() {
    for algorithm in [Algorithm::Fixed, Algorithm::Sliding, Algorithm::Buckets(6)] {
        let mut key = Key::new(5, 1_000, algorithm);
        let outcome = key.outcome(T0, 0);
        assert_eq!(outcome.expire_at.map(|at| at.get()), None);
        assert_eq!(
            outcome.verdict.to_reply(Unit::Milliseconds, Rounding::Up),
            [0, 5, 5, -1, 0]
        );
        key.call(T0, 2);
        let before = key.value.clone();
        let outcome = key.outcome(T0 + 1, 0);
        assert_eq!(outcome.expire_at.map(|at| at.get()), None);
        assert_eq!(outcome.verdict.remaining, 3);
        assert_eq!(key.value, before);
    }
}

#[test]
fn an_oversized_quantity_is_refused_for_good_and_writes_nothing() {
    for algorithm in [Algorithm::Fixed, Algorithm::Sliding, Algorithm::Buckets(6)] {
        let mut key = Key::new(5, 1_000, algorithm);
        key.call(T0, 1);
        let outcome = key.outcome(T0, 6);
        assert_eq!(outcome.expire_at.map(|at| at.get()), None);
        assert_eq!(
            outcome.verdict.to_reply(Unit::Milliseconds, Rounding::Up),
            [
                1,
                5,
                4,
                -1,
                if algorithm == Algorithm::Sliding {
                    2_000
                } else {
                    1_000
                }
            ]
        );
    }
}

#[test]
fn states_are_compact() {
    let length = |limit, algorithm| {
        let mut key = Key::new(limit, 60_000, algorithm);
        key.call(T0, 1);
        key.value.unwrap().len()
    };
    // The header, then each count in the width that holds them and the limit.
    assert_eq!(length(100, Algorithm::Fixed), 9);
    assert_eq!(length(1_000, Algorithm::Fixed), 10);
    assert_eq!(length(100_000, Algorithm::Fixed), 12);
    assert_eq!(length(1 << 40, Algorithm::Fixed), 16);
    assert_eq!(length(100, Algorithm::Sliding), 10);
    assert_eq!(length(1_000, Algorithm::Sliding), 12);
    // A bucket log: the tag, one entry (2 bytes and the count), the trailer.
    assert_eq!(length(100, Algorithm::Buckets(60)), 32);
    assert_eq!(length(1_000, Algorithm::Buckets(60)), 33);
    assert_eq!(length(100, Algorithm::Buckets(3_600)), 32);
}

#[test]
fn layout_is_tag_start_width_then_counts_oldest_first() {
    let mut key = Key::new(1_000, 2_000, Algorithm::Sliding);
    key.call(T0 + ms(2_500), 3);
    let start = (T0 + ms(2_000)) as u64 | (1 << START_BITS);
    let mut expected = vec![SLIDING_TAG];
    expected.extend_from_slice(&start.to_le_bytes()[..7]);
    // The previous count (0) and the current one (3), in the width that holds the limit.
    expected.extend_from_slice(&[0, 0, 3, 0]);
    assert_eq!(key.value.unwrap(), expected);
}

#[test]
fn a_changed_limit_counts_what_was_used_as_counted() {
    let limit = |limit| WindowLimiter::new(limit, 1_000, Unit::Milliseconds, Algorithm::Fixed);
    let mut key = Key::new(10, 1_000, Algorithm::Fixed);
    key.call(T0, 4);
    // Raised tenfold: 4 were used, and 96 more fit at once.
    key.limiter = limit(100).unwrap();
    assert_eq!(key.call(T0 + ms(100), 0), [0, 100, 96, -1, 900]);
    assert_eq!(key.call(T0 + ms(100), 96), [0, 100, 0, -1, 900]);
    assert_eq!(key.call(T0 + ms(100), 1), [1, 100, 0, 900, 900]);
    // Lowered under what was used (100): refused until the window ends.
    key.limiter = limit(3).unwrap();
    assert_eq!(key.call(T0 + ms(200), 1), [1, 3, 0, 800, 800]);
    // The next window starts empty, under the limit of the call.
    key.limiter = limit(5).unwrap();
    assert_eq!(key.call(T0 + ms(1_000), 1), [0, 5, 4, -1, 1_000]);
    assert_eq!(key.value.as_ref().unwrap().len(), 9);
}

/// The cases: 100 a window, 3 used, then 5: twice admitted, none left.
#[test]
fn a_lowered_limit_admits_what_is_left_under_it() {
    let limit = |limit| WindowLimiter::new(limit, 100, Unit::Seconds, Algorithm::Fixed);
    let mut key = Key::new(100, 100_000, Algorithm::Fixed);
    for _ in 0..3 {
        key.call(T0, 1);
    }
    key.limiter = limit(5).unwrap();
    assert_eq!(key.call(T0, 1)[..3], [0, 5, 1]);
    assert_eq!(key.call(T0, 1)[..3], [0, 5, 0]);
    assert_eq!(key.call(T0, 1)[0], 1);
}

/// A state of 5fec6b4's layout keeps the limit its counts were counted under: read, and the
/// counts are counted as they are.
#[test]
fn a_state_with_the_limit_it_was_counted_under_reads_its_counts_as_counted() {
    let start = (T0 as u64) | (1 << START_BITS);
    let mut stored = vec![FIXED_TAG];
    stored.extend_from_slice(&start.to_le_bytes()[..7]);
    // The limit (5), then the count (6), in two bytes each: 5fec6b4's FIXED layout.
    stored.extend_from_slice(&[5, 0, 6, 0]);
    let mut key = Key::new(500, 100_000, Algorithm::Fixed);
    key.value = Some(stored);
    assert_eq!(key.call(T0 + ms(1), 1)[..3], [0, 500, 493]);
}

#[test]
fn changing_the_bucket_count_keeps_everything_counted() {
    let limiter = |n| WindowLimiter::new(100, 2_000, Unit::Milliseconds, Algorithm::Buckets(n));
    let mut value = Vec::new();
    limiter(4).unwrap().encode(&[1, 2, 3, 4], T0, &mut value);
    let mut counts = Vec::new();
    assert_eq!(limiter(2).unwrap().decode(&value, &mut counts), Ok(T0));
    assert_eq!(counts, [6, 4]);
    assert_eq!(limiter(6).unwrap().decode(&value, &mut counts), Ok(T0));
    assert_eq!(counts, [0, 0, 1, 2, 3, 4]);
}

#[test]
fn other_values_are_refused() {
    let fixed = WindowLimiter::new(5, 1, Unit::Seconds, Algorithm::Fixed).unwrap();
    let sliding = WindowLimiter::new(5, 1, Unit::Seconds, Algorithm::Sliding).unwrap();
    let buckets = WindowLimiter::new(5, 1, Unit::Seconds, Algorithm::Buckets(4)).unwrap();
    let mut value = Vec::new();
    fixed.encode(&[1], T0, &mut value);
    let mut scratch = Scratch::default();
    let mut apply = |limiter: &WindowLimiter, stored: &[u8]| {
        limiter
            .apply(
                Some(stored),
                Micros::saturating(T0),
                1,
                true,
                &mut scratch,
                &mut Vec::new(),
            )
            .map(|_| ())
    };
    assert_eq!(apply(&fixed, &value), Ok(()));
    assert_eq!(apply(&sliding, &value), Err(StateError::OtherAlgorithm));
    assert_eq!(apply(&buckets, &value), Err(StateError::OtherAlgorithm));
    assert_eq!(apply(&fixed, &value[..8]), Err(StateError::Foreign));
    // One counter more is the limit 5fec6b4 kept; two more fit no layout.
    let mut longer = value.clone();
    longer.extend_from_slice(&[0, 0]);
    assert_eq!(apply(&fixed, &longer), Err(StateError::Foreign));
    assert_eq!(apply(&sliding, &longer), Err(StateError::OtherAlgorithm));
    let gcra_state =
        crate::core::codec::encode_gcra(Ticks::saturating(1), crate::core::gcra::Basis(1));
    assert_eq!(apply(&fixed, &gcra_state), Err(StateError::Foreign));
    assert_eq!(apply(&fixed, b"hello world"), Err(StateError::Foreign));
    assert_eq!(apply(&buckets, b""), Err(StateError::Foreign));
    // 5 bucket counters of 2 bytes are not 4 buckets of anything... but are 5 buckets.
    value.clear();
    buckets.encode(&[300, 0, 0, 0], T0, &mut value);
    value.extend_from_slice(&[0, 0]);
    assert_eq!(apply(&buckets, &value), Ok(()));
    value.push(0);
    assert_eq!(apply(&buckets, &value), Err(StateError::Foreign));
}

#[test]
fn refuses_parameters_it_cannot_honour() {
    let new = |limit, window, unit, algorithm| WindowLimiter::new(limit, window, unit, algorithm);
    use Algorithm::*;
    use Unit::*;
    assert_eq!(new(0, 1, Seconds, Fixed), Err(ParamError::NonPositiveLimit));
    assert_eq!(
        new(-1, 1, Seconds, Fixed),
        Err(ParamError::NonPositiveLimit)
    );
    assert_eq!(
        new(1, 0, Seconds, Sliding),
        Err(ParamError::NonPositiveWindow)
    );
    assert_eq!(
        new(1, -5, Seconds, Sliding),
        Err(ParamError::NonPositiveWindow)
    );
    assert_eq!(
        new(1, 1, Seconds, Buckets(0)),
        Err(ParamError::BucketsOutOfRange)
    );
    assert_eq!(
        new(1, 1, Seconds, Buckets(3_601)),
        Err(ParamError::BucketsOutOfRange)
    );
    assert!(new(1, 1, Seconds, Buckets(3_600)).is_ok());
    assert_eq!(
        new(1, 10, Microseconds, Buckets(11)),
        Err(ParamError::BucketTooShort)
    );
    assert!(new(1, 11, Microseconds, Buckets(11)).is_ok());
    assert_eq!(
        new(1, i64::MAX, Seconds, Fixed),
        Err(ParamError::WindowTooLong)
    );
    assert!(new(1, i64::MAX / 1_000, Microseconds, Fixed).is_ok());
    assert_eq!(
        new(1, i64::MAX / 1_000 + 1, Microseconds, Fixed),
        Err(ParamError::WindowTooLong)
    );
    assert_eq!(
        new(1, i64::MAX / 1_000, Microseconds, Buckets(3_600)),
        Err(ParamError::WindowTooLongForBuckets)
    );
    assert!(new(i64::MAX, 1, Seconds, Sliding).is_ok());
}

#[test]
fn a_clock_going_back_never_admits_more() {
    let mut key = Key::new(2, 2_000, Algorithm::Fixed);
    assert_eq!(key.admitted(T0 + ms(1_500), 2), 2);
    // Back within the window, then back into the previous window: still the same count.
    assert_eq!(key.call(T0 + ms(1_400), 1), [1, 2, 0, 600, 600]);
    assert_eq!(key.call(T0 - ms(600), 1), [1, 2, 0, 2_600, 2_600]);
    assert_eq!(key.call(T0 + ms(2_000), 1), [0, 2, 1, -1, 2_000]);
}

#[test]
fn a_clock_jumping_forward_resets_cleanly() {
    for algorithm in [Algorithm::Fixed, Algorithm::Sliding, Algorithm::Buckets(60)] {
        let mut key = Key::new(5, 1_000, algorithm);
        key.call(T0, 5);
        let far = T0 + ms(86_400_000 * 365 * 100);
        assert_eq!(key.call(far, 0), [0, 5, 5, -1, 0]);
        assert_eq!(key.call(far, 5)[0..3], [0, 5, 0]);
    }
}

// --- Properties -------------------------------------------------------------------------

/// The decisions recomputed from the whole history of admitted requests, the obvious way.
struct Model {
    limit: u64,
    window: i64,
    algorithm: Algorithm,
    admitted: Vec<(i64, u64)>,
}

impl Model {
    fn per_window(&self) -> i64 {
        match self.algorithm {
            Algorithm::Buckets(n) => i64::from(n),
            _ => 1,
        }
    }

    /// The bucket of `t`: floor(t * n / window), in 128 bits.
    fn bucket(&self, t: i64) -> i64 {
        (i128::from(t) * i128::from(self.per_window()) / i128::from(self.window)) as i64
    }

    /// What `ANCHORED` counts at `now`: a window starts at the first request admitted after
    /// the last one ended.
    fn anchored_used(&self, now: i64) -> u64 {
        let mut window: Option<(i64, u64)> = None;
        for &(t, q) in &self.admitted {
            window = match window {
                Some((start, used)) if t < start + self.window => Some((start, used + q)),
                _ => Some((t, q)),
            };
        }
        match window {
            Some((start, used)) if now < start + self.window => used,
            _ => 0,
        }
    }

    fn count(&self, buckets: impl Fn(i64) -> bool) -> u64 {
        self.admitted
            .iter()
            .filter(|&&(t, _)| buckets(self.bucket(t)))
            .map(|&(_, q)| q)
            .sum()
    }

    /// Whether `quantity` is admitted at `now`, and what remains after.
    fn decide(&mut self, now: i64, quantity: u64) -> (bool, i64) {
        let current = self.bucket(now);
        let limit = i128::from(self.limit);
        let w = i128::from(self.window);
        // The room left after `q` more, in units of `scale`.
        let (room, scale): (&dyn Fn(u64) -> i128, i128) = match self.algorithm {
            Algorithm::Fixed | Algorithm::Buckets(_) => {
                let n = self.per_window();
                let used = i128::from(self.count(|b| b > current - n && b <= current));
                (&move |q| limit - used - q as i128, 1)
            }
            Algorithm::Anchored => {
                let used = i128::from(self.anchored_used(now));
                (&move |q| limit - used - q as i128, 1)
            }
            Algorithm::Sliding => {
                let elapsed = i128::from(now) - i128::from(current) * w;
                let previous = i128::from(self.count(|b| b == current - 1));
                let cur = i128::from(self.count(|b| b == current));
                (
                    &move |q| limit * w - previous * (w - elapsed) - (cur + q as i128) * w,
                    w,
                )
            }
        };
        let admitted = quantity <= self.limit && room(quantity) >= 0;
        let charged = if admitted { quantity } else { 0 };
        let remaining = (room(charged).max(0) / scale) as i64;
        if admitted && quantity > 0 {
            self.admitted.push((now, quantity));
        }
        (admitted, remaining)
    }
}

fn algorithms() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::Fixed),
        Just(Algorithm::Sliding),
        (1u16..=12).prop_map(Algorithm::Buckets),
        Just(Algorithm::Anchored),
    ]
}

/// Windows in microseconds, including ones no bucket count divides.
fn windows() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(1_000_000),
        Just(2_000_000),
        Just(999_983),
        Just(60),
        12i64..5_000,
    ]
}

/// Request streams: (microseconds since the previous request, quantity).
fn requests(window: i64, limit: u64) -> impl Strategy<Value = Vec<(i64, u64)>> {
    prop::collection::vec((0..window / 3 + 2, 0..=limit + 1), 1..80)
}

fn setup() -> impl Strategy<Value = (Algorithm, u64, i64, Vec<(i64, u64)>)> {
    (algorithms(), 1u64..12, windows()).prop_flat_map(|(algorithm, limit, window)| {
        (
            Just(algorithm),
            Just(limit),
            Just(window),
            requests(window, limit),
        )
    })
}

fn limiter(algorithm: Algorithm, limit: u64, window: i64) -> Option<WindowLimiter> {
    WindowLimiter::new(limit as i64, window, Unit::Microseconds, algorithm).ok()
}

proptest! {
    #[test]
    fn decisions_match_the_model_recomputed_from_history((algorithm, limit, window, stream) in setup()) {
        let Some(limiter) = limiter(algorithm, limit, window) else { return Ok(()) };
        let mut key = Key::with(limiter);
        let mut model = Model { limit, window, algorithm, admitted: Vec::new() };
        let mut now = T0;
        for (step, quantity) in stream {
            now += step;
            let verdict = key.outcome(now, quantity).verdict;
            let (admitted, remaining) = model.decide(now, quantity);
            prop_assert_eq!(!verdict.limited, admitted, "at {} q {}", now - T0, quantity);
            prop_assert_eq!(verdict.remaining, remaining);
        }
    }

    #[test]
    fn never_admits_more_than_the_documented_bound((algorithm, limit, window, stream) in setup()) {
        let Some(limiter) = limiter(algorithm, limit, window) else { return Ok(()) };
        let mut key = Key::with(limiter);
        let mut admitted = Vec::new();
        let mut now = T0;
        for (step, quantity) in stream {
            now += step;
            if !key.outcome(now, quantity).verdict.limited && quantity > 0 {
                admitted.push((now, quantity));
            }
        }
        // Every `slots` consecutive buckets (FIXED, BUCKETS) or aligned window (SLIDING)
        // hold at most the limit, as does every ANCHORED window (from a request admitted
        // after the previous window ended); any interval of one window at most twice the
        // limit.
        let span = match algorithm { Algorithm::Sliding => 1, _ => limiter.slots as i64 };
        let mut anchor = i64::MIN;
        for &(t, _) in &admitted {
            let in_buckets: u64 = if algorithm == Algorithm::Anchored {
                if t >= anchor.saturating_add(window) {
                    anchor = t;
                }
                admitted.iter()
                    .filter(|&&(u, _)| u >= anchor && u < anchor + window)
                    .map(|&(_, q)| q).sum()
            } else {
                let last = limiter.bucket_of(t);
                admitted.iter()
                    .filter(|&&(u, _)| (last - span + 1..=last).contains(&limiter.bucket_of(u)))
                    .map(|&(_, q)| q).sum()
            };
            prop_assert!(in_buckets <= limit);
            let in_window: u64 = admitted.iter()
                .filter(|&&(u, _)| u > t - window && u <= t)
                .map(|&(_, q)| q).sum();
            prop_assert!(in_window <= 2 * limit);
        }
    }

    #[test]
    fn retry_times_are_exact((algorithm, limit, window, stream) in setup()) {
        let Some(limiter) = limiter(algorithm, limit, window) else { return Ok(()) };
        let mut key = Key::with(limiter);
        let mut now = T0;
        for (step, quantity) in stream {
            now += step;
            let (value, expire) = (key.value.clone(), key.expire_at_ms);
            let verdict = key.outcome(now, quantity).verdict;
            let Some(retry_after) = verdict.retry_after.get() else { continue };
            prop_assert_eq!(retry_after.get() % Ticks::MICROSECOND.get(), 0);
            let wait = retry_after.ceil_micros().get();
            prop_assert!(wait > 0);
            let mut later = Key { value: value.clone(), expire_at_ms: expire, ..Key::with(limiter) };
            prop_assert!(!later.outcome(now + wait, quantity).verdict.limited);
            let mut sooner = Key { value, expire_at_ms: expire, ..Key::with(limiter) };
            prop_assert!(sooner.outcome(now + wait - 1, quantity).verdict.limited);
        }
    }

    #[test]
    fn reset_and_expiry_mark_when_the_state_stops_mattering((algorithm, limit, window, stream) in setup()) {
        let Some(limiter) = limiter(algorithm, limit, window) else { return Ok(()) };
        let mut key = Key::with(limiter);
        let mut now = T0;
        for (step, quantity) in stream {
            now += step;
            let outcome = key.outcome(now, quantity);
            let reset = outcome.verdict.reset_after.ceil_micros().get();
            if let Some(expire_at_ms) = outcome.expire_at.map(|at| at.get()) {
                // The key lives until the reset, rounded up to its millisecond.
                prop_assert_eq!(expire_at_ms, (now + reset + 999) / 1_000);
            }
            // At the reset the limiter is full again; a moment before, it is not.
            let (value, expire) = (key.value.clone(), key.expire_at_ms);
            let mut at_reset = Key { value: value.clone(), expire_at_ms: expire, ..Key::with(limiter) };
            prop_assert_eq!(at_reset.outcome(now + reset, 0).verdict.remaining, limit as i64);
            if reset > 0 {
                let mut before = Key { value, expire_at_ms: expire, ..Key::with(limiter) };
                prop_assert!(before.outcome(now + reset - 1, 0).verdict.remaining < limit as i64);
            }
        }
    }

    #[test]
    fn a_peek_never_changes_the_state((algorithm, limit, window, stream) in setup()) {
        let Some(limiter) = limiter(algorithm, limit, window) else { return Ok(()) };
        let mut key = Key::with(limiter);
        let mut now = T0;
        for (step, quantity) in stream {
            now += step;
            let before = key.value.clone();
            let peek = key.outcome(now, 0);
            prop_assert_eq!(peek.expire_at, None);
            prop_assert_eq!(&key.value, &before);
            let verdict = key.outcome(now, quantity).verdict;
            prop_assert_eq!(peek.verdict.reset_after <= verdict.reset_after || verdict.limited, true);
        }
    }

    #[test]
    fn any_clock_and_state_gives_a_sane_reply(
        (algorithm, limit, window, stream) in setup(),
        jumps in prop::collection::vec(-5_000_000i64..5_000_000, 80),
    ) {
        let Some(limiter) = limiter(algorithm, limit, window) else { return Ok(()) };
        let mut key = Key::with(limiter);
        let mut now = T0;
        for ((_, quantity), jump) in stream.into_iter().zip(jumps) {
            now += jump;
            let outcome = key.outcome(now, quantity);
            let reply = outcome.verdict.to_reply(Unit::Microseconds, Rounding::Up);
            prop_assert!(reply[2] >= 0 && reply[2] <= reply[1]);
            prop_assert!(reply[3] >= -1 && reply[4] >= 0);
            if let Some(expire_at_ms) = outcome.expire_at.map(|at| at.get()) {
                prop_assert!(expire_at_ms * 1_000 >= now);
            }
        }
    }
}

#[test]
fn an_anchored_window_refunded_to_zero_stays_anchored_until_it_ends() {
    // 5 a second from the first request; two counted at 100 ms, both given back at 200.
    let mut key = Key::new(5, 1_000, Algorithm::Anchored);
    key.call(T0 + ms(100), 2);
    let mut value = Vec::new();
    let refund = key
        .limiter
        .refund(
            key.value.as_deref(),
            Micros::saturating(T0 + ms(200)),
            2,
            true,
            &mut key.scratch,
            &mut value,
        )
        .unwrap();
    assert!(refund.changed);
    // Kept until the window's end, as `DECR` leaves an `INCR` counter at 0 with its TTL.
    assert_eq!(
        refund.expire_at.map(|at| at.get()),
        Some((T0 + ms(1_100)) / 1_000)
    );
    key.value = Some(value);
    let counts = key
        .limiter
        .counts(key.value.as_deref(), Micros::saturating(T0 + ms(250)))
        .unwrap()
        .unwrap();
    assert_eq!(
        (counts.current, counts.current_ends_at),
        (0, Micros::saturating(T0 + ms(1_100)))
    );
    // The next request counts in the same window: it resets at 1,100 ms, not 1,300.
    assert_eq!(key.call(T0 + ms(300), 1), [0, 5, 4, -1, 800]);
    // A missing key counts nothing, and no window runs.
    let none = key
        .limiter
        .counts(None, Micros::saturating(T0))
        .unwrap()
        .unwrap();
    assert_eq!(
        (none.current, none.current_ends_at),
        (0, Micros::saturating(T0))
    );
}

#[test]
fn counts_are_read_as_the_calls_read_them() {
    // 10 per second, sliding: 4 in the window starting at T0, 3 in the next.
    let mut key = Key::new(10, 1_000, Algorithm::Sliding);
    key.call(T0 + ms(100), 4);
    key.call(T0 + ms(1_250), 3);
    let counts = |key: &Key, now: i64| {
        key.limiter
            .counts(key.value.as_deref(), Micros::saturating(now))
            .unwrap()
            .unwrap()
    };
    let at = T0 + ms(1_400);
    assert_eq!(
        counts(&key, at),
        WindowCounts {
            previous: 4,
            previous_ends_at: Micros::saturating(T0 + ms(2_000)),
            current: 3,
            current_ends_at: Micros::saturating(T0 + ms(3_000)),
        }
    );
    // Two windows on, nothing counts any more.
    let later = counts(&key, T0 + ms(3_100));
    assert_eq!((later.previous, later.current), (0, 0));
    // FIXED: the current window only, until it ends; BUCKETS has no two counts.
    let mut fixed = Key::new(10, 1_000, Algorithm::Fixed);
    fixed.call(T0 + ms(100), 2);
    assert_eq!(
        counts(&fixed, T0 + ms(200)),
        WindowCounts {
            previous: 0,
            previous_ends_at: Micros::saturating(T0 + ms(200)),
            current: 2,
            current_ends_at: Micros::saturating(T0 + ms(1_000)),
        }
    );
    let buckets = Key::new(10, 1_000, Algorithm::Buckets(4));
    assert!(buckets
        .limiter
        .counts(None, Micros::saturating(T0))
        .is_none());
}

/// Request streams whose limit changes from call to call: (microseconds since the previous
/// request, the call's limit, quantity). Limits past 255 widen the counters.
fn changing_requests(window: i64) -> impl Strategy<Value = Vec<(i64, u64, u64)>> {
    let limits = prop_oneof![4 => 1u64..12, 1 => 12u64..40, 1 => Just(300u64)];
    prop::collection::vec(
        (0..window / 3 + 2, limits)
            .prop_flat_map(|(step, limit)| (Just(step), Just(limit), 0..=limit + 1)),
        1..80,
    )
}

proptest! {
    /// Any history under limits that change from call to call: what was counted counts as
    /// counted, against each call's own limit, for every algorithm: every call is decided as
    /// the model of admitted requests decides it, and leaves what it says is left.
    #[test]
    fn a_changed_limit_counts_what_was_used(
        (algorithm, window, stream) in (algorithms(), windows())
            .prop_flat_map(|(algorithm, window)| {
                (Just(algorithm), Just(window), changing_requests(window))
            }),
    ) {
        let Some(first) = limiter(algorithm, stream[0].1, window) else { return Ok(()) };
        let mut key = Key::with(first);
        let mut model = Model { limit: stream[0].1, window, algorithm, admitted: Vec::new() };
        let mut now = T0;
        for (step, limit, quantity) in stream {
            now += step;
            let Some(limiter) = limiter(algorithm, limit, window) else { return Ok(()) };
            key.limiter = limiter;
            model.limit = limit;
            let verdict = key.outcome(now, quantity).verdict;
            let (admitted, remaining) = model.decide(now, quantity);
            prop_assert_eq!(!verdict.limited, admitted, "at {} limit {} q {}", now - T0, limit, quantity);
            prop_assert_eq!(verdict.remaining, remaining);
        }
    }
}
