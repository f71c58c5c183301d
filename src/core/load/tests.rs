use proptest::prelude::*;

use super::factors::{Admission, Aggregate, BbrTrigger, Report};
use super::layout::{LoadStateBytes, LOAD_TAG, VERSION};
use super::levels::LoadState;
use super::policy::{parse_number, Level, LoadError, Policy};
use super::priority::{admits, Priority, WHOLE};
use crate::core::time::Micros;

const T0: Micros = Micros::saturating(1_700_000_000_000_000);

fn ms(millis: i64) -> Micros {
    Micros::saturating(millis * 1_000)
}

fn report(instance: &str, expires: Micros, factors: &[(&str, f64)]) -> Report {
    Report {
        instance: instance.as_bytes().to_vec(),
        expires,
        factors: factors
            .iter()
            .map(|(name, value)| (name.as_bytes().to_vec(), *value))
            .collect(),
    }
}

/// Two levels on `cpu` at 0.5 and 0.8, 10% hysteresis, a hold of 1 s.
fn policy() -> Policy {
    Policy {
        levels: vec![
            Level {
                thresholds: vec![(b"cpu".to_vec(), 0.5)],
                shares: [WHOLE, WHOLE, 5_000, 2_000],
            },
            Level {
                thresholds: vec![(b"cpu".to_vec(), 0.8), (b"latency".to_vec(), 300.0)],
                shares: [WHOLE, 5_000, 0, 0],
            },
        ],
        hysteresis: 1_000,
        hold: ms(1_000),
        retry: ms(1_000),
        admission: Admission::default(),
        bbr: BbrTrigger::default(),
        custom: Vec::new(),
    }
}

fn state_with(policy: Policy) -> LoadState {
    LoadState {
        policy: Some(policy),
        ..LoadState::default()
    }
}

fn cpu(state: &mut LoadState, now: Micros, value: f64) -> u8 {
    state
        .report(report("a", now + ms(3_000), &[("cpu", value)]), now)
        .unwrap()
        .level
}

#[test]
fn a_level_is_entered_when_a_threshold_is_reached_and_shares_follow_it() {
    let mut state = state_with(policy());
    assert_eq!(cpu(&mut state, T0, 0.4), 0);
    assert_eq!(state.evaluate(T0).shares, [WHOLE; 4]);
    assert_eq!(cpu(&mut state, T0 + ms(10), 0.5), 1);
    assert_eq!(
        state.evaluate(T0 + ms(10)).shares,
        [WHOLE, WHOLE, 5_000, 2_000]
    );
    // Any factor of a level enters it: latency alone reaches level 2.
    state
        .report(
            report("b", T0 + ms(3_000), &[("latency", 350.0)]),
            T0 + ms(20),
        )
        .unwrap();
    assert_eq!(state.evaluate(T0 + ms(20)).level, 2);
}

#[test]
fn a_level_is_left_below_its_threshold_less_the_hysteresis_and_after_its_hold() {
    let mut state = state_with(policy());
    assert_eq!(cpu(&mut state, T0, 0.85), 2);
    // 0.75 is below 0.8 but within 10% of it: level 2 holds.
    assert_eq!(cpu(&mut state, T0 + ms(2_000), 0.75), 2);
    // 0.71 is below 0.72 (0.8 less 10%): down to level 1, whose 0.5 is reached.
    assert_eq!(cpu(&mut state, T0 + ms(2_100), 0.71), 1);
    let since = state.since;
    assert_eq!(since, T0 + ms(2_100));
    // Back to 0 only once level 1 has held for a second.
    assert_eq!(cpu(&mut state, T0 + ms(2_500), 0.1), 1);
    assert_eq!(cpu(&mut state, T0 + ms(3_099), 0.1), 1);
    assert_eq!(cpu(&mut state, T0 + ms(3_100), 0.1), 0);
    // Going up is never held back.
    assert_eq!(cpu(&mut state, T0 + ms(3_101), 0.9), 2);
}

#[test]
fn a_report_expires_on_its_own_and_stops_counting() {
    let mut state = state_with(policy());
    state
        .report(report("hot", T0 + ms(500), &[("cpu", 0.95)]), T0)
        .unwrap();
    state
        .report(report("cool", T0 + ms(5_000), &[("cpu", 0.1)]), T0)
        .unwrap();
    // The hot report entered level 2; with the cool one the mean is 0.525, level 1's, but
    // level 2 holds for a second.
    assert_eq!(state.evaluate(T0).level, 2);
    // The hot instance's report expired: only 0.1 counts, and the hold (from T0) has passed:
    // one level down, not two.
    assert_eq!(state.evaluate(T0 + ms(1_500)).level, 1);
    assert_eq!(state.factor(&policy(), b"cpu", T0 + ms(1_500)), Some(0.1));
    assert_eq!(state.factor(&policy(), b"cpu", T0 + ms(6_000)), None);
    assert_eq!(state.valid_until(T0), T0 + ms(500));
}

#[test]
fn each_factor_aggregates_as_its_table_says() {
    let mut state = LoadState::default();
    let until = T0 + ms(5_000);
    state
        .report(
            report(
                "a",
                until,
                &[("cpu", 0.2), ("memory", 0.9), ("inflight", 10.0)],
            ),
            T0,
        )
        .unwrap();
    state
        .report(
            report(
                "b",
                until,
                &[("cpu", 0.6), ("memory", 0.3), ("inflight", 5.0)],
            ),
            T0,
        )
        .unwrap();
    let policy = Policy::default();
    assert_eq!(state.factor(&policy, b"cpu", T0), Some(0.4), "mean");
    assert_eq!(state.factor(&policy, b"memory", T0), Some(0.9), "max");
    assert_eq!(state.factor(&policy, b"inflight", T0), Some(15.0), "sum");
    assert_eq!(state.factor(&policy, b"queue", T0), None, "not reported");
}

#[test]
fn sentinels_check_is_in_flight_over_max_throughput_times_min_latency_past_its_trigger() {
    let mut state = LoadState::default();
    let until = T0 + ms(5_000);
    // 100 requests a second at best, 20 ms at least: the pipe holds 2. 18 in flight: 9, at
    // a CPU past the trigger (0.9).
    let busy = [
        ("cpu", 0.95),
        ("inflight", 18.0),
        ("max_rps", 100.0),
        ("min_rt", 20.0),
    ];
    state.report(report("a", until, &busy), T0).unwrap();
    // The other instance keeps within its pipe: the worst one counts.
    let calm = [
        ("cpu", 0.95),
        ("inflight", 1.0),
        ("max_rps", 100.0),
        ("min_rt", 20.0),
    ];
    state.report(report("b", until, &calm), T0).unwrap();
    assert_eq!(state.factor(&Policy::default(), b"bbr", T0), Some(9.0));
    assert_eq!(state.evaluate(T0).level, 2, "the default policy's bbr 8");
    // Below the trigger, the same queue is not Sentinel's concern: no bbr, no level.
    let mut cool = LoadState::default();
    let below = [
        ("cpu", 0.85),
        ("inflight", 18.0),
        ("max_rps", 100.0),
        ("min_rt", 20.0),
    ];
    cool.report(report("a", until, &below), T0).unwrap();
    assert_eq!(cool.factor(&Policy::default(), b"bbr", T0), None);
    assert_eq!(cool.evaluate(T0).level, 0);
    // A trigger on another factor, or at 0 (always, once the factor is reported).
    let policy = Policy {
        bbr: BbrTrigger {
            factor: b"load".to_vec(),
            threshold: 0.0,
        },
        ..Policy::default()
    };
    let mut loaded = state_with(policy.clone());
    loaded
        .report(
            report(
                "a",
                until,
                &[
                    ("load", 0.1),
                    ("inflight", 18.0),
                    ("max_rps", 100.0),
                    ("min_rt", 20.0),
                ],
            ),
            T0,
        )
        .unwrap();
    assert_eq!(loaded.factor(&policy, b"bbr", T0), Some(9.0));
}

/// The two reports, on the default policy: a serial worker at half its CPU holding
/// two requests sheds nothing; a saturated one with a deep queue and one calm second after
/// no longer drops two levels at once.
#[test]
fn the_default_policy_sheds_nothing_from_a_healthy_service() {
    let mut state = LoadState::default();
    let healthy = [
        ("cpu", 0.47),
        ("inflight", 2.0),
        ("latency", 11.5),
        ("max_rps", 96.0),
        ("min_rt", 4.29),
    ];
    let standing = state
        .report(report("w1", T0 + ms(3_000), &healthy), T0)
        .unwrap();
    assert_eq!(standing.level, 0);
    assert_eq!(standing.shares_at(T0), [WHOLE; 4]);
    // Full CPU alone is no level either: a service that sheds by itself runs it full.
    let saturated = [("cpu", 1.0), ("inflight", 3.0), ("latency", 14.0)];
    let standing = state
        .report(report("w1", T0 + ms(4_000), &saturated), T0 + ms(1_000))
        .unwrap();
    assert_eq!(standing.level, 0);
}

#[test]
fn success_rate_throttling_follows_envoys_formula() {
    let admission = Admission::default();
    // 100 requests, 95 successes: exactly the 95% threshold, nothing rejected.
    assert_eq!(admission.rejection(100.0, 95.0), 0.0);
    // 100 requests, 50 successes: (100 - 50 / 0.95) / 101.
    let expected = (100.0 - 50.0 / 0.95) / 101.0;
    assert!((admission.rejection(100.0, 50.0) - expected).abs() < 1e-12);
    // No success at all: capped at 80%.
    assert_eq!(admission.rejection(1_000.0, 0.0), 0.8);
    // Aggression 2: the square root, more rejection at a small excess.
    let aggressive = Admission {
        aggression: 2.0,
        ..admission
    };
    assert!((aggressive.rejection(100.0, 50.0) - expected.sqrt()).abs() < 1e-12);
    // Below the fewest requests: nothing.
    let quiet = Admission {
        min_requests: 200.0,
        ..admission
    };
    assert_eq!(quiet.rejection(100.0, 0.0), 0.0);
    // Summed over the fleet.
    let mut state = LoadState::default();
    let until = T0 + ms(5_000);
    for (instance, requests, successes) in [("a", 60.0, 20.0), ("b", 40.0, 30.0)] {
        state
            .report(
                report(
                    instance,
                    until,
                    &[("requests", requests), ("successes", successes)],
                ),
                T0,
            )
            .unwrap();
    }
    let fleet = state.factor(&Policy::default(), b"admission", T0).unwrap();
    assert!((fleet - expected).abs() < 1e-12, "{fleet}");
}

#[test]
fn a_share_admits_that_part_of_the_draws() {
    assert!(admits(WHOLE, u64::MAX));
    assert!(!admits(0, 0));
    let admitted = (0..10_000u64).filter(|&draw| admits(2_500, draw)).count();
    assert_eq!(admitted, 2_500);
    let mut state = state_with(policy());
    cpu(&mut state, T0, 0.9);
    let priority = |name: &[u8]| Priority::parse(name).unwrap();
    // Level 2: critical_plus always, critical half, the rest never.
    let decide = |name: &[u8], draw| state.decide(priority(name), T0, draw);
    assert!(decide(b"critical_plus", 9_999).admitted);
    assert!(decide(b"critical", 4_999).admitted);
    assert!(!decide(b"critical", 5_000).admitted);
    assert!(!decide(b"SHEDDABLE_PLUS", 0).admitted);
    assert!(!decide(b"3", 0).admitted);
    assert_eq!(decide(b"3", 0).level, 2);
    assert_eq!(decide(b"3", 0).retry, ms(1_000));
}

#[test]
fn numbers_are_plain_decimals() {
    for (text, value) in [
        ("1", 1.0),
        ("0.25", 0.25),
        (".5", 0.5),
        ("2e3", 2000.0),
        ("-1", -1.0),
        ("7.", 7.0),
    ] {
        assert_eq!(parse_number(text.as_bytes()), Some(value), "{text}");
    }
    for text in [
        "", ".", "-", "inf", "nan", "0x10", " 1", "1 ", "1e", "1e+", "+1", "1,5", "1e999",
    ] {
        assert_eq!(parse_number(text.as_bytes()), None, "{text}");
    }
}

#[test]
fn priorities_are_named_or_numbered() {
    assert_eq!(Priority::parse(b"critical_plus").unwrap().index(), 0);
    assert_eq!(Priority::parse(b"Sheddable").unwrap().index(), 3);
    assert_eq!(Priority::parse(b"2").unwrap().index(), 2);
    assert_eq!(Priority::parse(b"4"), None);
    assert_eq!(Priority::parse(b"urgent"), None);
    assert_eq!(Priority::parse(b""), None);
}

#[test]
fn a_bad_policy_or_report_gets_its_error_and_changes_nothing() {
    let mut state = state_with(policy());
    cpu(&mut state, T0, 0.6);
    let before = state.clone();
    let with = |change: &dyn Fn(&mut Policy)| {
        let mut policy = policy();
        change(&mut policy);
        policy
    };
    let cases: [(Policy, LoadError); 6] = [
        (
            with(&|p| p.levels[0].thresholds[0].0 = b"gpu".to_vec()),
            LoadError::UnknownFactor,
        ),
        (
            with(&|p| p.levels[1].thresholds[0].1 = 0.4),
            LoadError::LevelOutOfOrder,
        ),
        (
            with(&|p| p.levels[1].shares = [WHOLE; 4]),
            LoadError::LevelOutOfOrder,
        ),
        (
            with(&|p| p.levels[0].shares[0] = 10_001),
            LoadError::BadShare,
        ),
        (
            with(&|p| p.levels[0].shares = [0, WHOLE, 0, 0]),
            LoadError::PriorityOutOfOrder,
        ),
        (with(&|p| p.levels.clear()), LoadError::TooMany),
    ];
    for (bad, error) in cases {
        let mut copy = state.clone();
        assert_eq!(copy.set_policy(Some(bad), T0), Err(error));
        assert_eq!(copy, before);
    }
    let mut copy = state.clone();
    assert_eq!(
        copy.report(report("a", T0 + ms(1), &[("gpu", 1.0)]), T0),
        Err(LoadError::UnknownFactor)
    );
    assert_eq!(
        copy.report(report("a", T0 + ms(1), &[("bbr", 1.0)]), T0),
        Err(LoadError::UnknownFactor),
        "derived, not reported"
    );
    assert_eq!(
        copy.report(report("a", T0 + ms(1), &[("cpu", f64::NAN)]), T0),
        Err(LoadError::BadValue)
    );
    assert_eq!(
        copy.report(report("", T0 + ms(1), &[("cpu", 0.1)]), T0),
        Err(LoadError::BadName)
    );
    assert_eq!(copy, before);
    // A custom factor, declared, may be reported and used.
    let mut custom = policy();
    custom.custom.push((b"backlog".to_vec(), Aggregate::Sum));
    custom.levels[0]
        .thresholds
        .push((b"backlog".to_vec(), 100.0));
    assert!(copy.set_policy(Some(custom), T0).is_ok());
    assert!(copy
        .report(report("b", T0 + ms(3_000), &[("backlog", 120.0)]), T0)
        .is_ok());
}

#[test]
fn the_default_policy_checks_and_round_trips() {
    Policy::default().validate().unwrap();
    let mut state = LoadState::default();
    state
        .report(report("a", T0 + ms(3_000), &[("memory", 0.96)]), T0)
        .unwrap();
    assert_eq!(state.level, 2);
    let mut bytes = Vec::new();
    state.encode(T0, &mut bytes);
    assert_eq!(LoadState::decode(&bytes), Some(state.clone()));
    let (standing, retry) = LoadStateBytes(&bytes).standing(T0).unwrap();
    assert_eq!(standing, state.evaluate(T0));
    assert_eq!(retry, Policy::default().retry);
    // After the first report expires, the header no longer stands.
    assert_eq!(LoadStateBytes(&bytes).standing(T0 + ms(3_000)), None);
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).unwrap())
        .collect()
}

/// States of layout 1, as the module wrote them before the levels eased (bytes taken from
/// that build): they load, their header decides, and they are written back in layout 2.
#[test]
fn states_of_layout_1_still_load() {
    // policy() with a declared factor, and one report at cpu 0.85: level 2 since T0.
    let with_policy = hex("f701020100401e18240a060040822d18240a0600102788130000000040420f0000000000e80340420f0000000000666666666666ee3f000000000000f03f00000000000000009a9999999999e93f01076261636b6c6f670202102710278813d0070103637075000000000000e03f102788130000000002036370759a9999999999e93f076c6174656e63790000000000c072400100057765622d31c0064c18240a06000403637075333333333333eb3f08696e666c696768740000000000001c40076d61785f7270730000000000005940066d696e5f72740000000000003440");
    let state = LoadState::decode(&with_policy).expect("a layout 1 state with a policy");
    let mut expected = state_with(policy());
    let set = expected.policy.as_mut().unwrap();
    set.custom.push((b"backlog".to_vec(), Aggregate::Sum));
    assert_eq!(
        state.policy, expected.policy,
        "the BBR trigger is the default"
    );
    assert_eq!((state.level, state.since), (2, T0));
    assert_eq!(state.reports.len(), 1);
    assert_eq!(state.reports[0].value(b"inflight"), Some(7.0));
    let (standing, retry) = LoadStateBytes(&with_policy).standing(T0 + ms(1)).unwrap();
    assert_eq!(standing.level, 2);
    assert_eq!(standing.shares_at(T0 + ms(1)), [WHOLE, 5_000, 0, 0]);
    assert_eq!(retry, ms(1_000));
    let mut again = Vec::new();
    state.encode(T0, &mut again);
    assert_eq!(again[1], VERSION);
    assert_eq!(LoadState::decode(&again), Some(state));
    // The default policy, one report at cpu 0.92 (level 2 then; the new default sees none).
    let default = hex("f701020000401e18240a060080c43c18240a0600102710278813000040420f000000000001000161c0064c18240a06000103637075713d0ad7a370ed3f");
    let state = LoadState::decode(&default).expect("a layout 1 state of the default policy");
    assert_eq!(state.policy, None);
    assert_eq!(state.level, 2, "as stored");
    let (standing, _) = LoadStateBytes(&default).standing(T0).unwrap();
    assert_eq!(
        standing.level, 2,
        "the header stands until its report expires"
    );
    assert_eq!(
        state.evaluate(T0 + ms(2_000)).level,
        1,
        "then down one level at a time"
    );
}

/// How many of the `WHOLE` draws a request of `priority` is admitted at `now`: its share.
fn admitted(state: &LoadState, priority: &[u8], now: Micros) -> usize {
    let priority = Priority::parse(priority).unwrap();
    (0..u64::from(WHOLE))
        .filter(|&draw| state.decide(priority, now, draw).admitted)
        .count()
}

/// Going down, the shares move in a straight line from the level left to the level entered
/// over the hold; the header says the same as the whole state; going up is at once.
#[test]
fn a_level_left_eases_its_shares_over_the_hold() {
    let mut state = state_with(policy());
    assert_eq!(cpu(&mut state, T0, 0.85), 2);
    // Level 2 admits critical half, sheddable_plus none; level 1 all and half.
    let standing = state.evaluate(T0 + ms(1_000));
    assert_eq!(standing.level, 2);
    let down = T0 + ms(1_000);
    assert_eq!(cpu(&mut state, down, 0.6), 1);
    let mut bytes = Vec::new();
    for (after, critical, sheddable_plus, sheddable) in [
        (0, 5_000, 0, 0),
        (250, 6_250, 1_250, 500),
        (500, 7_500, 2_500, 1_000),
        (999, 9_995, 4_995, 1_998),
        (1_000, WHOLE, 5_000, 2_000),
        (2_500, WHOLE, 5_000, 2_000),
    ] {
        let now = down + ms(after);
        let standing = state.evaluate(now);
        assert_eq!(standing.level, 1);
        let shares = [WHOLE, critical, sheddable_plus, sheddable];
        assert_eq!(standing.shares_at(now), shares, "{after} ms after");
        // While the header stands (until the report expires), it answers the same.
        state.encode(down, &mut bytes);
        if let Some((header, _)) = LoadStateBytes(&bytes).standing(now) {
            assert_eq!(
                header.shares_at(now),
                shares,
                "the header, {after} ms after"
            );
        }
        assert_eq!(admitted(&state, b"critical", now), usize::from(critical));
    }
    // Up again at once, whatever the easing.
    assert_eq!(cpu(&mut state, down + ms(100), 0.95), 2);
    assert_eq!(
        state.evaluate(down + ms(100)).shares_at(down + ms(100)),
        [WHOLE, 5_000, 0, 0]
    );
}

/// Level 0 sheds nothing, so it is entered whole, not eased into: the instant level 1 is
/// left, every class is admitted, however much level 1 shed (a level entered in an
/// overload's last moment refuses for its hold, not for a hold and an easing after it).
#[test]
fn level_zero_is_entered_without_easing() {
    let mut state = state_with(policy());
    assert_eq!(cpu(&mut state, T0, 0.6), 1);
    // Held: level 1 admits half of sheddable_plus and a fifth of sheddable.
    assert_eq!(cpu(&mut state, T0 + ms(500), 0.1), 1);
    let down = T0 + ms(1_000);
    assert_eq!(cpu(&mut state, down, 0.1), 0);
    for after in [0, 1, 500, 999, 2_000] {
        let now = down + ms(after);
        assert_eq!(
            state.evaluate(now).shares_at(now),
            [WHOLE; 4],
            "{after} ms after"
        );
        assert_eq!(
            admitted(&state, b"sheddable", now),
            usize::from(WHOLE),
            "{after} ms after"
        );
    }
    // The stored header says the same as the whole state.
    let mut bytes = Vec::new();
    state.encode(down, &mut bytes);
    let (header, _) = LoadStateBytes(&bytes)
        .standing(down + ms(1))
        .expect("the header stands while the report is live and the hold lasts");
    assert_eq!(header.shares_at(down + ms(1)), [WHOLE; 4]);
}

/// From the top level to none takes one hold a level, whatever the load fell to.
#[test]
fn levels_are_left_one_at_a_time() {
    let policy = ladder_policy(&[0.3, 0.6, 0.9], 1_000, 1_000);
    let mut state = state_with(policy);
    assert_eq!(cpu(&mut state, T0, 0.95), 3);
    let mut levels = Vec::new();
    for second in 1..=4 {
        levels.push(cpu(&mut state, T0 + ms(1_000 * second), 0.0));
    }
    assert_eq!(levels, [2, 1, 0, 0]);
}

#[test]
fn a_level_left_with_no_hold_is_evaluated_again_at_the_next_instant() {
    // A hold of 0 leaves a level a step an instant: the level stepped down to at a report
    // stands only for that instant, so a decision at the next reads the level below it, not
    // the stored one until the report expires.
    let policy = ladder_policy(&[0.3, 0.6], 0, 0);
    let mut state = state_with(policy);
    assert_eq!(cpu(&mut state, T0, 0.95), 2);
    let later = T0 + ms(10);
    assert_eq!(cpu(&mut state, later, 0.0), 1);
    assert_eq!(state.valid_until(later), later + Micros::saturating(1));
    assert_eq!(state.evaluate(later).level, 1);
    assert_eq!(state.evaluate(later + Micros::saturating(1)).level, 0);
}

/// What a model of the rules says the level is, step by step: the highest level reached, at
/// once; else one level down when the current one is no longer within its hysteresis, never
/// before the hold, nor at the instant it was entered. Written apart from `evaluate`, on plain
/// numbers.
fn model_level(thresholds: &[f64], hysteresis: f64, hold: i64, steps: &[(i64, f64)]) -> Vec<u8> {
    let (mut level, mut since) = (0usize, i64::MIN / 2);
    let mut levels = Vec::new();
    for &(now, value) in steps {
        let mut entered = 0;
        for (index, threshold) in thresholds.iter().enumerate() {
            if value >= *threshold {
                entered = index + 1;
            }
        }
        let mut kept = 0;
        for (index, threshold) in thresholds.iter().enumerate().take(level) {
            if value >= threshold * (1.0 - hysteresis) {
                kept = index + 1;
            }
        }
        let target = entered.max(kept);
        if target > level {
            level = target;
            since = now;
        } else if target < level && now > since && now >= since + hold {
            // Down one level at a time.
            level -= 1;
            since = now;
        }
        levels.push(level as u8);
    }
    levels
}

fn ladder_policy(thresholds: &[f64], hysteresis: u16, hold: i64) -> Policy {
    let levels = thresholds
        .iter()
        .enumerate()
        .map(|(index, threshold)| Level {
            thresholds: vec![(b"cpu".to_vec(), *threshold)],
            shares: [
                WHOLE,
                WHOLE,
                WHOLE.saturating_sub(3_000 * index as u16 + 3_000),
                0,
            ],
        })
        .collect();
    Policy {
        levels,
        hysteresis,
        hold: ms(hold),
        retry: ms(1_000),
        admission: Admission::default(),
        bbr: BbrTrigger::default(),
        custom: Vec::new(),
    }
}

proptest! {
    /// Reports of one instance over time move the level as the model says; the stored bytes
    /// read back as the state, and the header's standing, while it stands, is the
    /// evaluated one.
    #[test]
    fn levels_follow_the_model(
        steps in prop::collection::vec((0i64..1_500, 0u32..1_000), 1..60),
        hysteresis in 0u16..3_000,
        hold in 0i64..3_000,
    ) {
        let thresholds = [0.3, 0.6, 0.9];
        let policy = ladder_policy(&thresholds, hysteresis, hold);
        let mut state = state_with(policy);
        let mut now = T0;
        let mut timeline = Vec::new();
        let mut levels = Vec::new();
        for (step, value) in steps {
            now = now + ms(step);
            let value = f64::from(value) / 1_000.0;
            timeline.push(((now - T0).get() / 1_000, value));
            let standing = state
                .report(report("a", now + ms(1_000_000), &[("cpu", value)]), now)
                .unwrap();
            levels.push(standing.level);
            let mut bytes = Vec::new();
            state.encode(now, &mut bytes);
            prop_assert_eq!(LoadState::decode(&bytes), Some(state.clone()));
            if let Some((header, _)) = LoadStateBytes(&bytes).standing(now) {
                prop_assert_eq!(header, state.evaluate(now));
            }
        }
        let model = model_level(&thresholds, f64::from(hysteresis) / 10_000.0, hold, &timeline);
        prop_assert_eq!(levels, model);
    }

    /// With values inside one level's hysteresis band, the level never flaps.
    #[test]
    fn values_within_the_band_never_change_the_level(
        wobble in prop::collection::vec(0u32..100, 1..50),
    ) {
        let mut state = state_with(ladder_policy(&[0.5], 2_000, 0));
        let mut now = T0;
        prop_assert_eq!(cpu(&mut state, now, 0.55), 1);
        for step in wobble {
            now = now + ms(100);
            // From 0.4 (0.5 less 20%) to 0.5: inside the band.
            let value = 0.4 + f64::from(step) / 1_000.0;
            prop_assert_eq!(cpu(&mut state, now, value), 1);
        }
    }

    /// A decision admits a class with the frequency of its share, over draws.
    #[test]
    fn decisions_admit_each_class_its_share(level in 0u8..4) {
        let policy = ladder_policy(&[0.3, 0.6, 0.9], 0, 0);
        let mut state = state_with(policy.clone());
        let value = [0.0, 0.3, 0.6, 0.9][usize::from(level)];
        cpu(&mut state, T0, value);
        prop_assert_eq!(state.level, level);
        let shares = policy.shares_at(usize::from(level));
        for (class, share) in shares.iter().enumerate() {
            let priority = Priority::parse(&[b'0' + class as u8]).unwrap();
            let admitted = (0..WHOLE as u64)
                .filter(|&draw| state.decide(priority, T0, draw).admitted)
                .count();
            prop_assert_eq!(admitted, usize::from(*share));
        }
    }

    /// Bytes no module wrote never panic the decoder, and what it accepts round-trips.
    #[test]
    fn any_bytes_decode_to_a_state_or_nothing(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
        keep_header in any::<bool>(),
    ) {
        let mut bytes = bytes;
        if keep_header && bytes.len() >= 4 {
            bytes[0] = LOAD_TAG;
            bytes[1] = VERSION;
            bytes[3] &= 1;
        }
        let _ = LoadStateBytes(&bytes).standing(T0);
        if let Some(state) = LoadState::decode(&bytes) {
            let mut again = Vec::new();
            state.encode(T0, &mut again);
            prop_assert_eq!(LoadState::decode(&again), Some(state));
        }
    }
}
