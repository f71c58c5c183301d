//! The shared grammar's parser, and the declarations it and the rest follow from.

use super::*;
use crate::core::engine::Settled;

const SYNTAX: CommandError = CommandError::Syntax;

fn common(tail: &[&[u8]]) -> Result<CommonOptions, CommandError> {
    parse_options(tail, |_, _| Ok(false))
}

#[test]
fn nothing_optional_means_one_in_seconds() {
    assert_eq!(common(&[]), Ok(CommonOptions::default()));
    assert_eq!(CommonOptions::default().request, Request::take(1));
}

#[test]
fn quantity_then_unit_in_any_case() {
    assert_eq!(common(&[b"0"]).unwrap().request.quantity, 0);
    assert_eq!(
        common(&[b"7", b"ms"]).unwrap(),
        CommonOptions {
            unit: Unit::Milliseconds,
            request: Request::take(7),
            ..CommonOptions::default()
        }
    );
    assert_eq!(common(&[b"Us"]).unwrap().unit, Unit::Microseconds);
    assert_eq!(common(&[b"S"]).unwrap().unit, Unit::Seconds);
}

#[test]
fn bad_quantities_say_so() {
    assert_eq!(
        common(&[b"-1"]).unwrap_err().text(),
        "ERR quantity must not be negative"
    );
    for bad in [&b"1.5"[..], b"-", b"+x", b"1e3", b"99999999999999999999"] {
        assert_eq!(
            common(&[bad]).unwrap_err().text(),
            "ERR quantity is not an integer or out of range"
        );
    }
}

#[test]
fn keywords_out_of_place_repeated_or_unknown_are_syntax_errors() {
    for tail in [
        &[&b"ms"[..], b"5"][..],
        &[b"5", b"5"],
        &[b"ms", b"ms"],
        &[b"ms", b"us"],
        &[b"5", b"ms", b"extra"],
        &[b"5", b"minutes"],
        &[b"minutes"],
        &[b""],
        &[b"\xff"],
    ] {
        assert_eq!(common(tail), Err(SYNTAX), "{tail:?}");
    }
}

#[test]
fn refund_and_block_in_any_case_and_order() {
    let options = common(&[b"2", b"refund", b"MS"]).unwrap();
    assert_eq!(options.request, Request::refund(2));
    let options = common(&[b"Block", b"900", b"ms"]).unwrap();
    assert_eq!(options.request.block, Some(Micros::saturating(900_000)));
    assert_eq!(
        common(&[b"BLOCK", b"2"]).unwrap().request.block,
        Some(Micros::saturating(2_000_000))
    );
    assert_eq!(
        common(&[b"US", b"BLOCK", b"7"]).unwrap().request.block,
        Some(Micros::saturating(7))
    );
}

#[test]
fn bad_refunds_and_blocks_say_so() {
    let error = |tail: &[&[u8]]| common(tail).unwrap_err().text();
    for bad in [&b"0"[..], b"-5", b"1.5", b"x"] {
        assert_eq!(
            error(&[b"BLOCK", bad]),
            "ERR BLOCK must be a positive integer"
        );
    }
    assert_eq!(error(&[b"BLOCK"]), SYNTAX.text());
    assert_eq!(error(&[b"BLOCK", b"1", b"BLOCK", b"2"]), SYNTAX.text());
    assert_eq!(error(&[b"REFUND", b"REFUND"]), SYNTAX.text());
    assert_eq!(error(&[b"REFUND", b"3"]), SYNTAX.text());
    assert_eq!(
        error(&[b"REFUND", b"BLOCK", b"5"]),
        "ERR REFUND and BLOCK cannot be combined: a refund is never refused"
    );
    assert_eq!(
        error(&[b"BLOCK", b"9223372036854775807"]),
        "ERR BLOCK is too long: the limit is 2^63 nanoseconds (292 years)"
    );
    assert_eq!(
        error(&[b"-3", b"REFUND"]),
        "ERR quantity must not be negative"
    );
}

#[test]
fn a_command_can_take_its_own_keywords_with_values() {
    let mut seen = None;
    let options = parse_options(&[b"3", b"BUCKETS", b"60", b"MS"], |keyword, tail| {
        if keyword == Keyword::new("BUCKETS") {
            seen = tail.next_argument().and_then(parse_integer);
            return Ok(true);
        }
        Ok(false)
    })
    .unwrap();
    assert_eq!(seen, Some(60));
    assert_eq!(options.request.quantity, 3);
    assert_eq!(options.unit, Unit::Milliseconds);
}

#[test]
fn the_options_of_one_group_are_alternatives_each_pair_refused_by_name() {
    // The usage line writes a group as `[A|B|C]`: at most one of them.
    for (at, first) in OPTIONS.iter().enumerate() {
        for later in OPTIONS.iter().skip(at + 1) {
            let declared = later
                .conflicts
                .iter()
                .any(|&(other, _)| other as usize == at);
            if first.group == later.group {
                assert!(declared, "{:?} and {:?}", first.token, later.token);
            }
            let mut tail = vec![first.token.to_bytes()];
            tail.extend(first.duration.map(|_| &b"5"[..]));
            tail.push(later.token.to_bytes());
            tail.extend(later.duration.map(|_| &b"5"[..]));
            let parsed = common(&tail);
            if declared {
                let reply = parsed.unwrap_err().text();
                assert!(reply.contains("cannot be combined"), "{reply}");
                let (a, b) = (first.token.to_str().unwrap(), later.token.to_str().unwrap());
                assert!(reply.contains(a) && reply.contains(b), "{reply}");
            } else {
                assert!(parsed.is_ok(), "{tail:?}");
            }
        }
    }
}

#[test]
fn every_refusal_is_the_one_declared_and_the_rest_pass() {
    let refusers = [
        Refuser::ReadOnly,
        Refuser::Lease,
        Refuser::Load,
        Refuser::Acquire,
    ];
    for (at, option) in OPTIONS.iter().enumerate() {
        let mut tail = vec![option.token.to_bytes()];
        tail.extend(option.duration.map(|_| &b"5"[..]));
        let options = common(&tail).unwrap();
        assert!(options.given.has(Shared::ALL[at]));
        for refuser in refusers {
            let declared = (option.refused_by.iter()).find(|(by, _)| *by == refuser);
            assert_eq!(
                options.refuse(|by| by == refuser).err(),
                declared.map(|&(_, reply)| reply),
                "{:?} {refuser:?}",
                option.token
            );
        }
    }
    assert_eq!(CommonOptions::default().refuse(|_| true), Ok(()));
}

#[test]
fn rl_acquire_refuses_every_shared_option_with_its_declared_reply_or_a_syntax_error() {
    for option in &OPTIONS {
        let mut tail = vec![option.token.to_bytes()];
        tail.extend(option.duration.map(|_| &b"5"[..]));
        let declared = (option.refused_by.iter()).find(|(by, _)| *by == Refuser::Acquire);
        assert_eq!(
            common(&tail).unwrap().refuse_every(Refuser::Acquire),
            Err(declared.map_or(SYNTAX, |&(_, reply)| reply)),
            "{:?}",
            option.token
        );
    }
    let plain = common(&[b"3", b"MS"]).unwrap();
    assert_eq!(plain.refuse_every(Refuser::Acquire), Ok(()));
}

#[test]
fn each_option_sets_its_part_of_the_request_in_the_calls_unit() {
    let request = |tail: &[&[u8]]| common(tail).unwrap().request;
    let ms = Micros::saturating(5_000);
    assert_eq!(request(&[b"BLOCK", b"5", b"MS"]).block, Some(ms));
    assert_eq!(
        request(&[b"MS", b"DELAY", b"5"]).shortfall,
        Shortfall::Delay(ms)
    );
    assert_eq!(
        request(&[b"DELAY", b"0"]).shortfall,
        Shortfall::Delay(Micros::ZERO)
    );
    assert_eq!(request(&[b"at_most"]).shortfall, Shortfall::AtMost);
    assert_eq!(request(&[b"Force"]).shortfall, Shortfall::Force);
    assert_eq!(request(&[b"3", b"REFUND"]), Request::refund(3));
    assert_eq!(
        common(&[b"DELAY", b"-1"]).unwrap_err().text(),
        "ERR DELAY must be an integer of at least 0"
    );
}

#[test]
fn a_call_is_counted_and_answered_as_its_options_declare() {
    let outcome = |tail: &[&[u8]], limited: bool, settled: Settled| {
        let options = common(tail).unwrap();
        (
            options.outcome(limited, &settled),
            options.sixth_field(&settled),
        )
    };
    let settled = |wait: i64, granted: u64, forced: bool| Settled {
        wait: Micros::saturating(wait),
        granted,
        forced,
        ..Settled::default()
    };
    assert_eq!(
        outcome(&[], false, settled(0, 1, false)),
        (Outcome::Allowed, None)
    );
    assert_eq!(
        outcome(&[], true, settled(0, 0, false)),
        (Outcome::Limited, None)
    );
    assert_eq!(
        outcome(&[b"0"], false, settled(0, 0, false)),
        (Outcome::Peek, None)
    );
    assert_eq!(
        outcome(&[b"0", b"REFUND"], false, settled(0, 0, false)).0,
        Outcome::Refund
    );
    assert_eq!(
        outcome(&[b"DELAY", b"9"], false, settled(2_500_000, 1, false)),
        (Outcome::Delayed, Some(3))
    );
    assert_eq!(
        outcome(&[b"DELAY", b"9"], false, settled(0, 1, false)),
        (Outcome::Allowed, Some(0))
    );
    assert_eq!(
        outcome(&[b"DELAY", b"9"], true, settled(0, 0, false)),
        (Outcome::Limited, Some(0))
    );
    assert_eq!(
        outcome(&[b"4", b"AT_MOST"], false, settled(0, 2, false)),
        (Outcome::AtMost, Some(2))
    );
    assert_eq!(
        outcome(&[b"4", b"AT_MOST"], false, settled(0, 4, false)),
        (Outcome::Allowed, Some(4))
    );
    assert_eq!(
        outcome(&[b"4", b"FORCE"], false, settled(0, 4, true)),
        (Outcome::Forced, None)
    );
}

/// The parser the declarations replaced, written out keyword by keyword: the model the
/// table-driven one is held to.
fn model(tail: &[&[u8]]) -> Option<(u64, Unit, Request)> {
    let mut quantity = 1;
    let mut unit = None;
    let (mut refund, mut block, mut delay, mut at_most, mut force) =
        (false, None, None, false, false);
    let mut at = 0;
    while at < tail.len() {
        let arg = tail[at];
        at += 1;
        if at == 1
            && arg
                .first()
                .is_some_and(|b| b.is_ascii_digit() || *b == b'-' || *b == b'+')
        {
            quantity = u64::try_from(parse_integer(arg)?).ok()?;
            continue;
        }
        let word = std::str::from_utf8(arg).ok()?.to_ascii_uppercase();
        let mut value = |least: i64| {
            let value = tail.get(at).and_then(|arg| parse_integer(arg))?;
            at += 1;
            (value >= least).then_some(value)
        };
        match word.as_str() {
            "S" | "MS" | "US" if unit.is_none() => unit = Some(Keyword::new(&word).unit()?),
            "REFUND" if !refund => refund = true,
            "BLOCK" if block.is_none() => block = Some(value(1)?),
            "DELAY" if delay.is_none() => delay = Some(value(0)?),
            "AT_MOST" if !at_most => at_most = true,
            "FORCE" if !force => force = true,
            _ => return None,
        }
    }
    let shortfalls = usize::from(delay.is_some()) + usize::from(at_most) + usize::from(force);
    let refused = block.is_some() || shortfalls > 0;
    if shortfalls > 1 || (refund && refused) || (block.is_some() && (delay.is_some() || force)) {
        return None;
    }
    let unit = unit.unwrap_or(Unit::Seconds);
    let request = Request {
        action: if refund { Action::Refund } else { Action::Take },
        quantity,
        block: match block {
            Some(block) => Some(unit.span(block)?),
            None => None,
        },
        shortfall: match delay {
            Some(max_wait) => Shortfall::Delay(unit.span(max_wait)?),
            None if at_most => Shortfall::AtMost,
            None if force => Shortfall::Force,
            None => Shortfall::Refuse,
        },
    };
    Some((quantity, unit, request))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
    #[test]
    fn the_declared_grammar_accepts_and_reads_what_the_written_out_one_does(
        tail in proptest::collection::vec(proptest::sample::select(vec![
            "0", "1", "7", "-1", "x", "s", "MS", "us", "REFUND", "BLOCK", "Delay", "AT_MOST",
            "force", "9223372036854775807", "WARMUP",
        ]), 0..6),
    ) {
        let tail: Vec<&[u8]> = tail.iter().map(|arg| arg.as_bytes()).collect();
        let parsed = common(&tail).ok().map(|options| {
            (options.request.quantity, options.unit, options.request)
        });
        proptest::prop_assert_eq!(parsed, model(&tail), "{:?}", tail);
    }
}

#[test]
fn each_shared_option_names_its_own_declaration() {
    for (at, shared) in Shared::ALL.into_iter().enumerate() {
        assert_eq!(shared as usize, at);
        let token = OPTIONS[at].token.to_str().unwrap().replace('_', "");
        assert!(
            format!("{shared:?}").eq_ignore_ascii_case(&token),
            "{shared:?}"
        );
        assert_eq!(
            Shared::written(Keyword::from_token(OPTIONS[at].token)),
            Some(shared)
        );
    }
}
