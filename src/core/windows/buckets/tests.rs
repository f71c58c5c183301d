use std::collections::BTreeMap;

use super::*;
use crate::core::time::{Micros, Unit};
use crate::core::windows::Scratch;
use proptest::prelude::*;

/// 2023-11-14T22:13:20Z: a multiple of every window used here.
const T0: i64 = 1_700_000_000_000_000;

fn limiter(limit: i64, window_us: i64, buckets: u16) -> WindowLimiter {
    WindowLimiter::new(
        limit,
        window_us,
        Unit::Microseconds,
        Algorithm::Buckets(buckets),
    )
    .unwrap()
}

/// A key as Redis holds it: the value, placed as each write says, and its expiry.
#[derive(Clone, Default)]
struct Key {
    value: Option<Vec<u8>>,
    expire_at_ms: Option<i64>,
    /// Bytes each write sent (a patch's, or the whole value's).
    written: Vec<usize>,
}

/// What one call replied and wrote.
#[derive(Debug, PartialEq, Eq)]
struct Call {
    verdict: Verdict,
    expire_at_ms: Option<i64>,
}

impl Key {
    fn take(&mut self, limiter: &WindowLimiter, now: i64, quantity: u64, patch: bool) -> Call {
        let mut bytes = Vec::new();
        let outcome = limiter
            .apply(
                self.live(now),
                Micros::saturating(now),
                quantity,
                patch,
                &mut Scratch::default(),
                &mut bytes,
            )
            .unwrap();
        if let Some(expire_at_ms) = outcome.expire_at.map(|at| at.get()) {
            self.store(&bytes, outcome.placement, expire_at_ms);
        }
        Call {
            verdict: outcome.verdict,
            expire_at_ms: outcome.expire_at.map(|at| at.get()),
        }
    }

    fn refund(&mut self, limiter: &WindowLimiter, now: i64, quantity: u64, patch: bool) -> Call {
        let mut bytes = Vec::new();
        let refund = limiter
            .refund(
                self.live(now),
                Micros::saturating(now),
                quantity,
                patch,
                &mut Scratch::default(),
                &mut bytes,
            )
            .unwrap();
        match (refund.changed, refund.expire_at.map(|at| at.get())) {
            (true, Some(expire_at_ms)) => self.store(&bytes, refund.placement, expire_at_ms),
            (true, None) => *self = Key::default(),
            (false, _) => {}
        }
        Call {
            verdict: refund.verdict,
            expire_at_ms: refund
                .expire_at
                .map(|at| at.get())
                .filter(|_| refund.changed),
        }
    }

    /// The value, unless it expired by `now`.
    fn live(&self, now: i64) -> Option<&[u8]> {
        match self.expire_at_ms {
            Some(expire_at_ms) if expire_at_ms * 1_000 <= now => None,
            _ => self.value.as_deref(),
        }
    }

    fn store(&mut self, bytes: &[u8], placement: Placement, expire_at_ms: i64) {
        if placement.expiry_kept {
            assert_eq!(self.expire_at_ms, Some(expire_at_ms), "a kept expiry moved");
        }
        self.value = Some(placement.place(self.value.as_deref(), bytes));
        self.expire_at_ms = Some(expire_at_ms);
        self.written.push(bytes.len());
    }
}

/// The decisions recomputed from every bucket's count, the obvious way (time moving
/// forward only).
struct Model {
    limiter: WindowLimiter,
    limit: u64,
    counts: BTreeMap<i64, u64>,
}

impl Model {
    fn window(&self, now: i64) -> (i64, std::ops::RangeInclusive<i64>) {
        let current = self.limiter.bucket_of(now);
        let n = self.limiter.buckets_per_window();
        (current, current - n + 1..=current)
    }

    fn used(&self, now: i64) -> u64 {
        let (_, window) = self.window(now);
        self.counts.range(window).map(|(_, &count)| count).sum()
    }

    fn reset_after(&self, now: i64) -> i64 {
        let (_, window) = self.window(now);
        let newest = self
            .counts
            .range(window)
            .rev()
            .find(|(_, &count)| count > 0);
        let n = self.limiter.buckets_per_window();
        newest.map_or(0, |(&bucket, _)| {
            (self.limiter.bucket_start(bucket + n) - now).max(0)
        })
    }

    fn expire_at_ms(&self, now: i64) -> Option<i64> {
        let reset = self.reset_after(now);
        (self.used(now) > 0).then(|| (now + reset + 999) / 1_000)
    }

    fn verdict(&self, now: i64, limited: bool, retry_after: Option<i64>) -> Verdict {
        Verdict {
            limited,
            limit: self.limit as i64,
            remaining: self.limit.saturating_sub(self.used(now)) as i64,
            retry_after: retry_after
                .map(|micros| Micros::saturating(micros).ticks())
                .into(),
            reset_after: Micros::saturating(self.reset_after(now)).ticks(),
        }
    }

    fn take(&mut self, now: i64, quantity: u64) -> Call {
        let (current, window) = self.window(now);
        let used = self.used(now);
        if quantity <= self.limit && used + quantity <= self.limit {
            if quantity > 0 {
                *self.counts.entry(current).or_default() += quantity;
            }
            let expire_at_ms = (quantity > 0).then(|| self.expire_at_ms(now)).flatten();
            return Call {
                verdict: self.verdict(now, false, None),
                expire_at_ms,
            };
        }
        // Refused: the oldest counts leave first.
        let retry_after = (quantity <= self.limit).then(|| {
            let excess = used + quantity - self.limit;
            let mut freed = 0;
            let n = self.limiter.buckets_per_window();
            for (&bucket, &count) in self.counts.range(window) {
                freed += count;
                if freed >= excess {
                    return self.limiter.bucket_start(bucket + n) - now;
                }
            }
            unreachable!("the counts add up to more than the excess")
        });
        Call {
            verdict: self.verdict(now, true, retry_after),
            expire_at_ms: None,
        }
    }

    fn refund(&mut self, now: i64, quantity: u64) -> Call {
        let (_, window) = self.window(now);
        let mut left = quantity;
        for (_, count) in self.counts.range_mut(window).rev() {
            let returned = left.min(*count);
            *count -= returned;
            left -= returned;
        }
        let used = self.used(now);
        Call {
            verdict: self.verdict(now, used > self.limit, None),
            expire_at_ms: (left < quantity).then(|| self.expire_at_ms(now)).flatten(),
        }
    }
}

#[test]
fn layout_is_tag_entries_then_trailer() {
    let limiter = limiter(1_000, 3_000_000, 3);
    let mut key = Key::default();
    key.take(&limiter, T0 + 500_000, 2, true);
    key.take(&limiter, T0 + 2_100_000, 300, true);
    let value = key.value.unwrap();
    let first = limiter.bucket_of(T0);
    let mut expected = vec![TAG];
    // Counts of 2 bytes: the limit needs them.
    expected.extend_from_slice(&(first as u16).to_le_bytes());
    expected.extend_from_slice(&2u16.to_le_bytes());
    expected.extend_from_slice(&((first + 2) as u16).to_le_bytes());
    expected.extend_from_slice(&300u16.to_le_bytes());
    expected.extend_from_slice(&[0, 0, 1, 0, 3, 0]); // front 0, newest 1, n 3
    expected.extend_from_slice(&3_000_000u64.to_le_bytes()[..7]);
    expected.extend_from_slice(&((first + 2) as u64 | 1 << LAST_BITS).to_le_bytes()[..7]);
    expected.extend_from_slice(&302u64.to_le_bytes());
    assert_eq!(value, expected);
}

#[test]
fn a_log_kept_under_another_limit_counts_what_was_used() {
    let mut key = Key::default();
    let ten = limiter(10, 3_000_000, 3);
    key.take(&ten, T0, 1, true);
    key.take(&ten, T0 + 1_000_000, 2, true);
    key.take(&ten, T0 + 2_000_000, 2, true);
    // 5 were used, of 10 or of 100: 95 left.
    let hundred = limiter(100, 3_000_000, 3);
    let call = key.take(&hundred, T0 + 2_500_000, 0, true);
    assert_eq!(call.verdict.remaining, 95);
    assert_eq!(call.expire_at_ms, None, "a peek writes nothing");
    // The first bucket's one leaves with it.
    let call = key.take(&hundred, T0 + 3_000_000, 96, true);
    assert!(!call.verdict.limited);
    assert_eq!(call.verdict.remaining, 0);
    // Lowered to 3 under 100 used: refused until enough leaves the window.
    let three = limiter(3, 3_000_000, 3);
    let call = key.take(&three, T0 + 3_000_000, 1, true);
    assert!(call.verdict.limited);
    let seven = limiter(7, 3_000_000, 3);
    let call = key.take(&seven, T0 + 3_000_000, 0, true);
    assert_eq!(call.verdict.remaining, 0);
}

#[test]
fn a_log_of_5fec6b4s_layout_is_read_as_counted_and_rewritten_whole() {
    let limiter = limiter(10, 3_000_000, 3);
    let mut key = Key::default();
    key.take(&limiter, T0, 2, true);
    // The same log as 5fec6b4 wrote it: tag 0xF6, the trailer ending with the limit the
    // counts were counted under (here 4, another limit).
    let mut value = key.value.take().unwrap();
    value[0] = LIMITED_TAG;
    value.extend_from_slice(&4u64.to_le_bytes());
    key.value = Some(value);
    let call = key.take(&limiter, T0 + 1_000_000, 3, true);
    assert_eq!(call.verdict.remaining, 5);
    let value = key.value.as_ref().unwrap();
    assert_eq!((value[0], *key.written.last().unwrap()), (TAG, value.len()));
}

#[test]
fn a_call_writes_the_same_few_bytes_whatever_n() {
    // An hour of one-second buckets, a request in every bucket for three hours: after the
    // first write, each one sends an entry and the trailer (2 + 4 + 36 bytes), except the
    // compactions, which send no more in all than the calls between them.
    let limiter = limiter(1_000_000, 3_600_000_000, 3_600);
    let mut key = Key::default();
    for second in 0..3 * 3_600 {
        let call = key.take(&limiter, T0 + second * 1_000_000 + 1, 1, true);
        assert!(!call.verdict.limited);
    }
    let patch_len = 6 + TRAILER_LEN;
    let patches = key.written.iter().filter(|&&len| len == patch_len).count();
    let whole: usize = key.written.iter().filter(|&&len| len != patch_len).sum();
    assert!(patches > 3 * 3_600 - 10, "{patches} patches");
    let per_call = (patches * patch_len + whole) as f64 / key.written.len() as f64;
    assert!(per_call < 3.0 * patch_len as f64, "{per_call} bytes a call");
    // Never more than about twice the live entries held.
    let len = key.value.unwrap().len();
    assert!(
        len <= 1 + (2 * 3_600 + COMPACT_AFTER) * 6 + TRAILER_LEN,
        "{len} bytes"
    );
}

#[test]
fn a_refund_lowers_the_newest_counts_first() {
    let limiter = limiter(10, 3_000_000, 3);
    let mut key = Key::default();
    key.take(&limiter, T0, 4, true);
    key.take(&limiter, T0 + 1_000_000, 3, true);
    // 5 back: 3 from the newest bucket, 2 from the one before; the key now ends when the
    // first bucket leaves the window.
    let call = key.refund(&limiter, T0 + 1_500_000, 5, true);
    assert_eq!(call.verdict.remaining, 8);
    assert_eq!(call.expire_at_ms, Some((T0 + 3_000_000) / 1_000));
    assert_eq!(
        call.verdict.reset_after,
        Micros::saturating(1_500_000).ticks()
    );
    // More than is left: everything back, and the key goes.
    let call = key.refund(&limiter, T0 + 1_500_000, 50, true);
    assert_eq!(call.verdict.remaining, 10);
    assert_eq!(call.expire_at_ms, None);
    assert_eq!(key.value, None);
}

#[test]
fn first_release_states_keep_their_counts() {
    let limiter = limiter(100, 4_000_000, 4);
    // All four counts, oldest first, the newest bucket starting at T0 + 3 s.
    let mut value = Vec::new();
    limiter.encode(&[1, 2, 0, 4], T0 + 3_000_000, &mut value);
    assert_eq!(value[0], super::BUCKETS_V1_TAG);
    let mut key = Key {
        value: Some(value),
        ..Key::default()
    };
    let call = key.take(&limiter, T0 + 3_500_000, 0, true);
    assert_eq!(call.verdict.remaining, 93);
    // The oldest bucket (1) leaves at T0 + 4 s, the next (2) at T0 + 5 s.
    let call = key.take(&limiter, T0 + 4_000_000, 95, true);
    assert!(call.verdict.limited);
    assert_eq!(
        call.verdict.retry_after,
        Some(Micros::saturating(1_000_000).ticks())
    );
    let call = key.take(&limiter, T0 + 4_000_000, 94, true);
    assert!(!call.verdict.limited);
    assert_eq!(key.value.as_ref().unwrap()[0], TAG);
}

#[test]
fn a_log_kept_with_another_n_or_window_keeps_its_counts() {
    let mut key = Key::default();
    let four = limiter(100, 4_000_000, 4);
    key.take(&four, T0 + 100, 1, true);
    key.take(&four, T0 + 1_000_100, 2, true);
    key.take(&four, T0 + 3_000_100, 4, true);
    // Two buckets of 2 s: the counts move to the buckets where they began.
    let two = limiter(100, 4_000_000, 2);
    assert_eq!(
        key.take(&two, T0 + 3_500_000, 0, true).verdict.remaining,
        93
    );
    let call = key.take(&two, T0 + 4_000_000, 98, true);
    assert_eq!(
        call.verdict.retry_after,
        Some(Micros::saturating(2_000_000).ticks())
    );
    // A window of 8 s in 8 buckets: the same instants, in 1-second buckets.
    let eight = limiter(100, 8_000_000, 8);
    assert_eq!(
        key.take(&eight, T0 + 3_500_000, 0, true).verdict.remaining,
        93
    );
}

#[test]
fn damaged_logs_are_refused_not_trusted() {
    let limiter = limiter(10, 3_000_000, 3);
    let mut key = Key::default();
    key.take(&limiter, T0, 1, true);
    let value = key.value.unwrap();
    let apply = |value: &[u8]| {
        limiter
            .apply(
                Some(value),
                Micros::saturating(T0),
                1,
                true,
                &mut Scratch::default(),
                &mut Vec::new(),
            )
            .map(|_| ())
    };
    assert_eq!(apply(&value), Ok(()));
    assert_eq!(apply(&value[..value.len() - 1]), Err(StateError::Foreign));
    assert_eq!(apply(&value[..MIN_LEN - 1]), Err(StateError::Foreign));
    let trailer = value.len() - TRAILER_LEN;
    let mut bad_front = value.clone();
    bad_front[trailer] = 9;
    assert_eq!(apply(&bad_front), Err(StateError::Foreign));
    let mut bad_n = value.clone();
    bad_n[trailer + 4] = 0;
    assert_eq!(apply(&bad_n), Err(StateError::Foreign));
    let fixed = WindowLimiter::new(10, 3, Unit::Seconds, Algorithm::Fixed).unwrap();
    let other = fixed.apply(
        Some(&value),
        Micros::saturating(T0),
        1,
        true,
        &mut Scratch::default(),
        &mut Vec::new(),
    );
    assert_eq!(other.map(|_| ()), Err(StateError::OtherAlgorithm));
}

/// Operations: (µs since the previous one, quantity, whether a refund).
fn operations(window: i64, limit: u64) -> impl Strategy<Value = Vec<(i64, u64, bool)>> {
    prop::collection::vec(
        (0..window / 2 + 2, 0..=limit + 1, prop::bool::weighted(0.2)),
        1..300,
    )
}

fn setups() -> impl Strategy<Value = (WindowLimiter, u64, Vec<(i64, u64, bool)>)> {
    // Windows of a few µs per bucket (bucket numbers wrap past 2^16 often) to a second.
    (
        1u64..20,
        1u16..80,
        prop_oneof![Just(1i64), 1i64..50, Just(1_000_000)],
    )
        .prop_flat_map(|(limit, n, per_bucket)| {
            let window = i64::from(n) * per_bucket + per_bucket / 3;
            (
                Just(limiter(limit as i64, window, n)),
                Just(limit),
                operations(window, limit),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn calls_match_the_model_patched_or_whole((limiter, limit, ops) in setups()) {
        let mut model = Model { limiter, limit, counts: BTreeMap::new() };
        let (mut patched, mut whole) = (Key::default(), Key::default());
        let mut now = T0;
        for (step, quantity, refund) in ops {
            now += step;
            let (expected, by_patch, by_whole) = if refund {
                (
                    model.refund(now, quantity),
                    patched.refund(&limiter, now, quantity, true),
                    whole.refund(&limiter, now, quantity, false),
                )
            } else {
                (
                    model.take(now, quantity),
                    patched.take(&limiter, now, quantity, true),
                    whole.take(&limiter, now, quantity, false),
                )
            };
            prop_assert_eq!(&by_patch, &expected, "at +{} µs, {} {}", now - T0, quantity, refund);
            prop_assert_eq!(&by_whole, &expected);
        }
    }

    #[test]
    fn any_bytes_after_the_tag_are_refused_or_used_never_a_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..120),
        quantity in 0u64..5,
        refund in any::<bool>(),
    ) {
        let limiter = limiter(10, 3_000_000, 3);
        let tag = if refund { TAG } else { LIMITED_TAG };
        let mut value = vec![tag];
        value.extend_from_slice(&bytes);
        let mut out = Vec::new();
        if refund {
            let _ = limiter.refund(Some(&value), Micros::saturating(T0), quantity, true, &mut Scratch::default(), &mut out);
        } else {
            let _ = limiter.apply(Some(&value), Micros::saturating(T0), quantity, true, &mut Scratch::default(), &mut out);
        }
    }
}
