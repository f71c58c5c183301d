//! Effects read back as they were sent: the exact wire form of each, a round trip for any
//! effect, and no panic on any input a copy may be sent. That applying them rebuilds the
//! master's state is checked by the engine's in-memory store after every call of every
//! engine test (`engine::memory`), and by `engine::tests` over random calls.

use proptest::prelude::*;

use super::*;
use crate::core::params::MAX_DEBT_LIMITS;

fn words(effect: &Effect) -> Vec<String> {
    let mut scratch = Packed::default();
    let encoded = effect.encode(&mut scratch);
    let mut words = vec![encoded.command.to_str().unwrap().to_owned()];
    words.extend(
        encoded
            .args()
            .iter()
            .map(|arg| String::from_utf8_lossy(&arg.bytes()).into_owned()),
    );
    words
}

fn round_trip<'a>(effect: &Effect<'a>) -> Result<Effect<'static>, EffectError> {
    let mut scratch = Packed::default();
    let encoded = effect.encode(&mut scratch);
    let args: Vec<&'static [u8]> = encoded
        .args()
        .iter()
        .map(|arg| &*Box::leak(arg.bytes().into_boxed_slice()))
        .collect();
    Effect::decode(encoded.command.to_bytes(), &args)
}

fn log_limiter(limit: i64, window_us: i64) -> LogLimiter {
    LogLimiter::new(limit, window_us, Unit::Microseconds).unwrap()
}

const NOW: Micros = Micros::saturating(1_763_850_000_000_000);

#[test]
fn each_effect_has_one_wire_form() {
    let log = |change| {
        Effect::Log(LogEffect {
            limiter: log_limiter(100, 60_000_000),
            now: NOW,
            change,
        })
    };
    let lease = |change| Effect::Lease(LeaseEffect { now: NOW, change });
    let limiter = LeaseLimiter::new(3, 30, Unit::Seconds).unwrap();
    let cases: [(Effect, &[&str]); 14] = [
        (
            Effect::Set {
                value: b"state",
                expire_at: Millis::saturating(1_763_850_060_000),
            },
            &["SET", "state", "PXAT", "1763850060000"],
        ),
        (
            Effect::SetRange {
                offset: 70,
                bytes: b"end",
            },
            &["SETRANGE", "70", "end"],
        ),
        (
            Effect::ExpireAt(Millis::saturating(1_763_850_060_000)),
            &["PEXPIREAT", "1763850060000"],
        ),
        (Effect::Delete, &["DEL"]),
        (
            log(LogChange::Take {
                quantity: 2,
                at: NOW,
            }),
            &["RL.LOG.APPLY", "100,60000000,1763850000000000,TAKE,2"],
        ),
        (
            log(LogChange::Take {
                quantity: 2,
                at: NOW + Micros::saturating(1_500),
            }),
            &[
                "RL.LOG.APPLY",
                "100,60000000,1763850000000000,TAKE,2,1763850000001500",
            ],
        ),
        (
            log(LogChange::Refund { quantity: 1 }),
            &["RL.LOG.APPLY", "100,60000000,1763850000000000,REFUND,1"],
        ),
        (
            log(LogChange::Block {
                until: NOW + Micros::saturating(10_000_000),
            }),
            &[
                "RL.LOG.APPLY",
                "100,60000000,1763850000000000,BLOCK,1763850010000000",
            ],
        ),
        (
            log(LogChange::Force { quantity: 150 }),
            &["RL.LOG.APPLY", "100,60000000,1763850000000000,FORCE,150"],
        ),
        (
            lease(LeaseChange::Acquire {
                limiter,
                quantity: 1,
                id: 42,
            }),
            &["RL.LEASE.APPLY", "ACQUIRE,1763850000000000,3,30000000,1,42"],
        ),
        (
            lease(LeaseChange::Release { id: 42 }),
            &["RL.LEASE.APPLY", "RELEASE,1763850000000000,42"],
        ),
        (
            lease(LeaseChange::Renew {
                id: 42,
                lease: Micros::saturating(5_000_000),
            }),
            &["RL.LEASE.APPLY", "RENEW,1763850000000000,42,5000000"],
        ),
        (
            Effect::LogChunk {
                entries: b"12345678",
                blocked_until: Some(NOW),
            },
            &[
                "RL.LOG.LOADCHUNK",
                "12345678",
                "BLOCKED",
                "1763850000000000",
            ],
        ),
        (
            Effect::LeaseChunk {
                next_id: 7,
                leases: b"",
            },
            &["RL.LEASE.LOADCHUNK", "7", ""],
        ),
    ];
    for (effect, expected) in cases {
        assert_eq!(words(&effect), expected);
        assert_eq!(round_trip(&effect), Ok(effect));
    }
}

#[test]
fn a_string_write_sends_one_set_or_the_end_that_changed() {
    let whole = Placement::WHOLE;
    let expire_at = Millis::saturating(1_000);
    let short = [7u8; PATCH_ABOVE];
    assert_eq!(
        string_effects(&short, &short, whole, expire_at),
        [
            Some(Effect::Set {
                value: &short,
                expire_at
            }),
            None
        ]
    );
    // A patch of a short value still goes whole.
    let patch = Placement {
        at: 10,
        expiry_kept: true,
    };
    assert_eq!(
        string_effects(&short, &short[10..], patch, expire_at)[0],
        Some(Effect::Set {
            value: &short,
            expire_at
        })
    );
    // A longer one: its end, and the expiry only when it moved.
    let long = [9u8; PATCH_ABOVE + 1];
    assert_eq!(
        string_effects(&long, &long[60..], Placement { at: 60, ..patch }, expire_at),
        [
            Some(Effect::SetRange {
                offset: 60,
                bytes: &long[60..]
            }),
            None
        ]
    );
    let moved = Placement {
        at: 60,
        expiry_kept: false,
    };
    assert_eq!(
        string_effects(&long, &long[60..], moved, expire_at)[1],
        Some(Effect::ExpireAt(expire_at))
    );
}

#[test]
fn what_earlier_releases_sent_for_a_log_still_reads() {
    let decode = |args: &[&[u8]]| LegacyLogReplay::decode(args).unwrap();
    let limiter = log_limiter(3, 1_000_000);
    let take = decode(&[b"3,1000000,2,1700000000000000"]);
    assert_eq!(
        take,
        LegacyLogReplay {
            limiter,
            request: Request::take(2),
            now: Micros::saturating(1_700_000_000_000_000)
        }
    );
    // 0.1: the same fields, each an argument.
    assert_eq!(decode(&[b"3", b"1000000", b"2", b"1700000000000000"]), take);
    assert_eq!(
        decode(&[b"3,1000000,1,1700000000000000,REFUND"]).request,
        Request::refund(1)
    );
    assert_eq!(
        decode(&[b"3,1000000,1,1700000000000000,BLOCK,500000"])
            .request
            .block,
        Some(Micros::saturating(500_000))
    );
    for (suffix, shortfall) in [
        (
            &b",DELAY,250"[..],
            Shortfall::Delay(Micros::saturating(250)),
        ),
        (b",AT_MOST", Shortfall::AtMost),
        (b",FORCE", Shortfall::Force),
    ] {
        let fields = [&b"3,1000000,1,1700000000000000"[..], suffix].concat();
        assert_eq!(decode(&[&fields]).request.shortfall, shortfall);
    }
    for bad in [
        &b"3,1000000,1"[..],
        b"3,1000000,1,1700000000000000,BLOCK",
        b"3,1000000,-1,1700000000000000",
        b"0,1000000,1,1700000000000000",
        b"3,1000000,1,1700000000000000,REFUND,BLOCK,5",
    ] {
        assert!(LegacyLogReplay::decode(&[bad]).is_err(), "{bad:?}");
    }
}

#[test]
fn changes_no_master_sends_are_refused() {
    let decode = |command: &CStr, fields: &'static [u8]| {
        Effect::decode(command.to_bytes(), &[fields]).map(|_| ())
    };
    for bad in [
        &b"3,1000000,1700000000000000,TAKE,4"[..], // More than the limit.
        b"3,1000000,1700000000000000,TAKE,0",
        b"3,1000000,1700000000000000,TAKE",
        b"3,1000000,1700000000000000,FORCE,49", // More than 16 limits' worth.
        b"3,1000000,1700000000000000,REFUND,-1",
        b"3,1000000,1700000000000000,NOTHING,1",
        b"3,0,1700000000000000,TAKE,1",
        b"3,1000000,x,TAKE,1",
    ] {
        assert!(decode(LOG_APPLY, bad).is_err(), "{bad:?}");
    }
    for bad in [
        &b"ACQUIRE,1700000000000000,3,30000000,4,42"[..],
        b"ACQUIRE,1700000000000000,3,30000000,1,0",
        b"RELEASE,1700000000000000",
        b"RENEW,1700000000000000,42,0",
        b"TAKE,1700000000000000,42",
    ] {
        assert!(decode(LEASE_APPLY, bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        Effect::decode(b"SET", &[b"v", b"PX", b"1000"]),
        Err(EffectError::Unknown)
    );
    assert_eq!(Effect::decode(b"INCR", &[]), Err(EffectError::Unknown));
}

fn log_changes() -> impl Strategy<Value = (i64, LogChange)> {
    (1i64..=1 << 20).prop_flat_map(|limit| {
        let quantity = 1..=limit as u64;
        let change = prop_oneof![
            (quantity.clone(), 0i64..1 << 40).prop_map(|(quantity, later)| LogChange::Take {
                quantity,
                at: NOW + Micros::saturating(later),
            }),
            (1u64..u64::MAX >> 2).prop_map(|quantity| LogChange::Refund { quantity }),
            (0i64..1 << 53).prop_map(|until| LogChange::Block {
                until: Micros::saturating(until)
            }),
            (1..=limit as u64 * MAX_DEBT_LIMITS).prop_map(|quantity| LogChange::Force { quantity }),
        ];
        (Just(limit), change)
    })
}

fn lease_changes() -> impl Strategy<Value = LeaseChange> {
    let id = 1u64..1 << 54;
    prop_oneof![
        (1i64..=1 << 16, 1i64..1 << 40, id.clone()).prop_flat_map(|(limit, lease, id)| {
            (1..=limit as u64).prop_map(move |quantity| LeaseChange::Acquire {
                limiter: LeaseLimiter::new(limit, lease, Unit::Microseconds).unwrap(),
                quantity,
                id,
            })
        }),
        id.clone().prop_map(|id| LeaseChange::Release { id }),
        (id, 1i64..1 << 50).prop_map(|(id, lease)| LeaseChange::Renew {
            id,
            lease: Micros::saturating(lease)
        }),
    ]
}

proptest! {
    #[test]
    fn any_log_change_reads_back((limit, change) in log_changes(), window in 1i64..1 << 50, now in 0i64..1 << 53) {
        let effect = Effect::Log(LogEffect {
            limiter: log_limiter(limit, window),
            now: Micros::saturating(now),
            change: match change {
                LogChange::Take { quantity, at } => LogChange::Take { quantity, at: at.max(Micros::saturating(now)) },
                change => change,
            },
        });
        prop_assert_eq!(round_trip(&effect), Ok(effect));
    }

    #[test]
    fn any_lease_change_reads_back(change in lease_changes(), now in 0i64..1 << 53) {
        let effect = Effect::Lease(LeaseEffect { now: Micros::saturating(now), change });
        prop_assert_eq!(round_trip(&effect), Ok(effect));
    }

    #[test]
    fn any_string_effect_reads_back(
        value in prop::collection::vec(any::<u8>(), 0..80),
        offset in 0usize..100,
        expire_at in any::<i64>(),
    ) {
        for effect in [
            Effect::Set { value: &value, expire_at: Millis::saturating(expire_at) },
            Effect::SetRange { offset, bytes: &value },
            Effect::ExpireAt(Millis::saturating(expire_at)),
            Effect::Delete,
            Effect::LogChunk { entries: &value, blocked_until: Some(Micros::saturating(expire_at.max(0))) },
            Effect::LogChunk { entries: &value, blocked_until: None },
            Effect::LeaseChunk { next_id: expire_at.unsigned_abs() >> 1, leases: &value },
        ] {
            prop_assert_eq!(round_trip(&effect), Ok(effect));
        }
    }

    #[test]
    fn no_input_makes_a_copy_panic(
        command in prop::sample::select(vec!["SET", "SETRANGE", "PEXPIREAT", "DEL", "RL.LOG.APPLY",
            "RL.LEASE.APPLY", "RL.LOG.LOADCHUNK", "RL.LEASE.LOADCHUNK", "rl.log.apply", "GET"]),
        args in prop::collection::vec(
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..30),
                "[A-Z0-9,-]{0,40}".prop_map(String::into_bytes),
            ],
            0..4,
        ),
    ) {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let _ = Effect::decode(command.as_bytes(), &args);
        let _ = LegacyLogReplay::decode(&args);
    }
}
