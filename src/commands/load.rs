//! Graded limiting by load, one key per service ([`crate::core::load`]):
//!
//! - `RL.LOAD.REPORT key instance ttl factor value [factor value ...]`: an instance's factors,
//!   counting for `ttl` milliseconds; replies `[level, instances, share, share, share,
//!   share]`, the service's level and what it admits of each priority class, most important
//!   first, so that the instance learns them in the call that reports;
//! - `RL.LOAD.POLICY key [DEFAULT | [HYSTERESIS share] [HOLD ms] [RETRY ms] [ADMISSION threshold
//!   aggression min_requests max_rejection] [BBR factor threshold] [FACTOR name MAX | MEAN | SUM
//!   [FACTOR name MAX | MEAN | SUM ...]] LEVEL factor threshold [factor threshold ...] SHARES
//!   critical_plus critical sheddable_plus sheddable [LEVEL factor threshold [factor threshold
//!   ...] SHARES critical_plus critical sheddable_plus sheddable ...]]`: sets the service's policy
//!   (its levels, their thresholds and shares), or the default back, in one write; with nothing
//!   after the key, replies the policy in force in the words that set it;
//! - `RL.LOAD.STATUS key`: the level, since when, the live instances, the shares and every
//!   factor's value over the fleet, for operators.
//!
//! A request is then decided by `RL.ALL ... LOAD priority` on the same key, with its other
//! limiters, in one atomic call.

use std::ffi::CStr;

use crate::core::engine::{self, LoadChange, Store};
use crate::core::load::{
    parse_number, Admission, Aggregate, BbrTrigger, Level, LoadError, LoadState, Policy, Report,
    Standing, DERIVED, MAX_LEVELS, MAX_THRESHOLDS, PRIORITIES, REPORTED, WHOLE,
};
use crate::core::time::Micros;
use crate::error::CommandError;
use crate::options::integer_argument;
use crate::redis::call::{Invocation, Item, Reply};
use crate::redis::clock;
use crate::redis::registration::{Arg, ArgKind, Mode};
use crate::redis::store::RedisStore;

/// `RL.LOAD.POLICY`'s arguments, as `COMMAND DOCS` gives them and its syntax errors name them:
/// the key, then `DEFAULT`, or the policy (its options, then a level or more, each its
/// thresholds and the share of each class it admits).
pub(super) const POLICY_ARGS: &[Arg] = &[
    Arg::new(c"key", ArgKind::Key),
    Arg::one_of(
        c"policy",
        &[
            Arg::token(c"DEFAULT"),
            Arg::block(
                c"levels",
                &[
                    Arg::new(c"share", ArgKind::String)
                        .after_token(c"HYSTERESIS")
                        .optional(),
                    Arg::new(c"ms", ArgKind::Integer)
                        .after_token(c"HOLD")
                        .optional(),
                    Arg::new(c"ms", ArgKind::Integer)
                        .after_token(c"RETRY")
                        .optional(),
                    Arg::block(
                        c"admission",
                        &[
                            Arg::token(c"ADMISSION"),
                            Arg::new(c"threshold", ArgKind::String),
                            Arg::new(c"aggression", ArgKind::String),
                            Arg::new(c"min_requests", ArgKind::String),
                            Arg::new(c"max_rejection", ArgKind::String),
                        ],
                    )
                    .optional(),
                    Arg::block(
                        c"bbr",
                        &[
                            Arg::token(c"BBR"),
                            Arg::new(c"factor", ArgKind::String),
                            Arg::new(c"threshold", ArgKind::String),
                        ],
                    )
                    .optional(),
                    Arg::block(
                        c"aggregate",
                        &[
                            Arg::token(c"FACTOR"),
                            Arg::new(c"name", ArgKind::String),
                            Arg::one_of(
                                c"how",
                                &[Arg::token(c"MAX"), Arg::token(c"MEAN"), Arg::token(c"SUM")],
                            ),
                        ],
                    )
                    .optional()
                    .multiple(),
                    Arg::block(
                        c"level",
                        &[
                            Arg::token(c"LEVEL"),
                            Arg::block(
                                c"threshold",
                                &[
                                    Arg::new(c"factor", ArgKind::String),
                                    Arg::new(c"threshold", ArgKind::String),
                                ],
                            )
                            .multiple(),
                            Arg::token(c"SHARES"),
                            Arg::new(c"critical_plus", ArgKind::String),
                            Arg::new(c"critical", ArgKind::String),
                            Arg::new(c"sheddable_plus", ArgKind::String),
                            Arg::new(c"sheddable", ArgKind::String),
                        ],
                    )
                    .multiple(),
                ],
            ),
        ],
    )
    .optional(),
];

/// A policy that is not one: `ERR syntax error. Usage: ...` from [`POLICY_ARGS`].
pub(super) const POLICY_USAGE: CommandError = CommandError::Syntax;

impl From<LoadError> for CommandError {
    fn from(error: LoadError) -> CommandError {
        CommandError::Message(error.message())
    }
}

/// A factor's or an instance's name: lower-case ASCII letters, digits, `_`, `-`, `.` and
/// `:` (instances are often `host:port`), 1 to 64 of them.
fn name(arg: &[u8]) -> Result<Vec<u8>, CommandError> {
    let allowed =
        |byte: &u8| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.' | b':');
    if arg.is_empty() || arg.len() > crate::core::load::MAX_NAME_LEN || !arg.iter().all(allowed) {
        return Err(CommandError::Message(
            c"ERR a name has 1 to 64 letters, digits, '_', '-', '.' or ':'",
        ));
    }
    Ok(arg.to_ascii_lowercase())
}

/// A factor's value or a threshold: a decimal number, not negative.
fn value(arg: &[u8]) -> Result<f64, CommandError> {
    parse_number(arg)
        .filter(|value| *value >= 0.0)
        .ok_or(CommandError::Message(
            c"ERR a value must be a decimal number, not negative",
        ))
}

/// A share from 0 to 1, in parts of [`WHOLE`] (to the nearest).
fn share(arg: &[u8]) -> Result<u16, CommandError> {
    let share = parse_number(arg)
        .filter(|share| (0.0..=1.0).contains(share))
        .ok_or(CommandError::from(LoadError::BadShare))?;
    Ok((share * f64::from(WHOLE)).round() as u16)
}

/// A duration in milliseconds, as a span.
fn millis(arg: &[u8], what: &'static CStr) -> Result<Micros, CommandError> {
    let millis = integer_argument(arg, what)?;
    millis
        .checked_mul(1_000)
        .and_then(Micros::instant)
        .ok_or(CommandError::Message(what))
}

/// The shares as a reply's doubles, 0 to 1.
fn share_items(shares: [u16; 4]) -> impl Iterator<Item = Item> {
    shares
        .into_iter()
        .map(|share| Item::Double(f64::from(share) / f64::from(WHOLE)))
}

/// The standing at `now` as a reply: `[level, instances, share ...]`, the shares eased.
fn standing_items(standing: &Standing, instances: usize, now: Micros) -> Vec<Item> {
    let mut items = vec![
        Item::Integer(i64::from(standing.level)),
        Item::Integer(instances as i64),
    ];
    items.extend(share_items(standing.shares_at(now)));
    items
}

pub(super) fn report(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let args = &call.args[2..];
    let [instance, ttl, pairs @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return Err(CommandError::Syntax);
    }
    let instance = name(instance)?;
    let ttl = millis(ttl, c"ERR ttl must be a positive number of milliseconds")?;
    if ttl <= Micros::ZERO {
        return Err(CommandError::Message(
            c"ERR ttl must be a positive number of milliseconds",
        ));
    }
    let mut factors = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks_exact(2) {
        factors.push((name(pair[0])?, value(pair[1])?));
    }
    let now = clock::now();
    let report = Report {
        instance,
        expires: now + ttl,
        factors,
    };
    let store = RedisStore::single(call, false);
    let mut key = store.open(0, true)?;
    let mut buffer = Vec::new();
    let standing = engine::change_load(&mut key, LoadChange::Report(report), now, &mut buffer)??;
    let instances = engine::load_state(&key)?.map_or(0, |state| live(&state, now));
    Ok(Reply::Items(standing_items(&standing, instances, now)))
}

/// How many instances have a live report at `now`.
fn live(state: &LoadState, now: Micros) -> usize {
    state
        .reports
        .iter()
        .filter(|report| report.expires > now)
        .count()
}

pub(super) fn policy(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let args = &call.args[2..];
    let store = RedisStore::single(call, false);
    if args.is_empty() {
        let key = store.open(0, false)?;
        let state = engine::load_state(&key)?.unwrap_or_default();
        let words = policy_words(&state.policy());
        return Ok(Reply::Items(words.into_iter().map(Item::Bulk).collect()));
    }
    let policy = if let [word] = args {
        if !word.eq_ignore_ascii_case(b"DEFAULT") {
            return Err(POLICY_USAGE);
        }
        None
    } else {
        Some(parse_policy(args)?)
    };
    let mut key = store.open(0, true)?;
    let mut buffer = Vec::new();
    engine::change_load(
        &mut key,
        LoadChange::Policy(policy),
        clock::now(),
        &mut buffer,
    )??;
    Ok(Reply::Ok)
}

pub(super) fn status(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let store = RedisStore::single(call, false);
    let key = store.open(0, false)?;
    let state = engine::load_state(&key)?.unwrap_or_default();
    let now = clock::now();
    let standing = state.evaluate(now);
    let policy = state.policy();
    let mut factors = Vec::new();
    let names = REPORTED
        .iter()
        .map(|(name, _)| name.as_bytes().to_vec())
        .chain(DERIVED.iter().map(|name| name.as_bytes().to_vec()))
        .chain(policy.custom.iter().map(|(name, _)| name.clone()));
    for name in names {
        if let Some(value) = state.factor(&policy, &name, now) {
            factors.push(Item::Bulk(name));
            factors.push(Item::Double(value));
        }
    }
    let shares = share_items(standing.shares_at(now)).collect();
    let word = |text: &str| Item::Bulk(text.as_bytes().to_vec());
    Ok(Reply::Items(vec![
        word("level"),
        Item::Integer(i64::from(standing.level)),
        word("since"),
        Item::Integer(standing.since.ceil_millis().get()),
        word("instances"),
        Item::Integer(live(&state, now) as i64),
        word("shares"),
        Item::Array(shares),
        word("policy"),
        word(if state.policy.is_some() {
            "set"
        } else {
            "default"
        }),
        word("factors"),
        Item::Array(factors),
    ]))
}

/// Reads a policy: its options, then its levels in order.
fn parse_policy(args: &[&[u8]]) -> Result<Policy, CommandError> {
    let defaults = Policy::default();
    let mut policy = Policy {
        levels: Vec::new(),
        hysteresis: defaults.hysteresis,
        hold: defaults.hold,
        retry: defaults.retry,
        admission: Admission::default(),
        bbr: BbrTrigger::default(),
        custom: Vec::new(),
    };
    let mut rest = args;
    let is = |arg: &[u8], word: &str| arg.eq_ignore_ascii_case(word.as_bytes());
    while let [word, after @ ..] = rest {
        rest = match *after {
            [fraction, ref tail @ ..] if is(word, "HYSTERESIS") => {
                policy.hysteresis = share(fraction)?;
                tail
            }
            [duration, ref tail @ ..] if is(word, "HOLD") => {
                policy.hold = millis(duration, c"ERR HOLD takes milliseconds, not negative")?;
                tail
            }
            [duration, ref tail @ ..] if is(word, "RETRY") => {
                policy.retry = millis(duration, c"ERR RETRY takes milliseconds, not negative")?;
                tail
            }
            [threshold, aggression, min_requests, max_rejection, ref tail @ ..]
                if is(word, "ADMISSION") =>
            {
                policy.admission = Admission {
                    threshold: f64::from(share(threshold)?) / f64::from(WHOLE),
                    aggression: value(aggression)?,
                    min_requests: value(min_requests)?,
                    max_rejection: f64::from(share(max_rejection)?) / f64::from(WHOLE),
                };
                tail
            }
            [factor, threshold, ref tail @ ..] if is(word, "BBR") => {
                policy.bbr = BbrTrigger {
                    factor: name(factor)?,
                    threshold: value(threshold)?,
                };
                tail
            }
            [factor, aggregate, ref tail @ ..] if is(word, "FACTOR") => {
                let aggregate = Aggregate::parse(aggregate).ok_or(POLICY_USAGE)?;
                policy.custom.push((name(factor)?, aggregate));
                tail
            }
            _ if is(word, "LEVEL") => {
                let (level, tail) = parse_level(after)?;
                if policy.levels.len() == MAX_LEVELS {
                    return Err(LoadError::TooMany.into());
                }
                policy.levels.push(level);
                tail
            }
            _ => return Err(POLICY_USAGE),
        };
    }
    if policy.levels.is_empty() {
        return Err(CommandError::Message(
            c"ERR a policy has at least one LEVEL (RL.LOAD.POLICY key DEFAULT sets the default)",
        ));
    }
    Ok(policy)
}

/// `factor threshold [factor threshold ...] SHARES share share share share`, and what
/// follows.
fn parse_level<'a, 'b>(args: &'a [&'b [u8]]) -> Result<(Level, &'a [&'b [u8]]), CommandError> {
    let shares_at = args
        .iter()
        .position(|arg| arg.eq_ignore_ascii_case(b"SHARES"))
        .ok_or(POLICY_USAGE)?;
    let (pairs, after) = args.split_at(shares_at);
    if pairs.is_empty() || pairs.len() % 2 != 0 || after.len() < 5 {
        return Err(POLICY_USAGE);
    }
    if pairs.len() / 2 > MAX_THRESHOLDS {
        return Err(LoadError::TooMany.into());
    }
    let mut thresholds = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks_exact(2) {
        thresholds.push((name(pair[0])?, value(pair[1])?));
    }
    let mut shares = [0; 4];
    for (share_of, arg) in shares.iter_mut().zip(&after[1..5]) {
        *share_of = share(arg)?;
    }
    Ok((Level { thresholds, shares }, &after[5..]))
}

/// The words that set `policy`, as `RL.LOAD.POLICY` takes them.
fn policy_words(policy: &Policy) -> Vec<Vec<u8>> {
    let mut words: Vec<String> = Vec::new();
    let share = |share: u16| format!("{}", f64::from(share) / f64::from(WHOLE));
    words.push("HYSTERESIS".into());
    words.push(share(policy.hysteresis));
    words.push("HOLD".into());
    words.push((policy.hold.get() / 1_000).to_string());
    words.push("RETRY".into());
    words.push((policy.retry.get() / 1_000).to_string());
    let admission = &policy.admission;
    words.push("ADMISSION".into());
    for value in [
        admission.threshold,
        admission.aggression,
        admission.min_requests,
        admission.max_rejection,
    ] {
        words.push(format!("{value}"));
    }
    words.push("BBR".into());
    words.push(String::from_utf8_lossy(&policy.bbr.factor).into_owned());
    words.push(format!("{}", policy.bbr.threshold));
    for (name, aggregate) in &policy.custom {
        words.push("FACTOR".into());
        words.push(String::from_utf8_lossy(name).into_owned());
        words.push(aggregate.word().into());
    }
    for level in &policy.levels {
        words.push("LEVEL".into());
        for (name, threshold) in &level.thresholds {
            words.push(String::from_utf8_lossy(name).into_owned());
            words.push(format!("{threshold}"));
        }
        words.push("SHARES".into());
        words.extend(level.shares.iter().map(|&s| share(s)));
    }
    debug_assert_eq!(PRIORITIES.len(), 4);
    words.into_iter().map(String::into_bytes).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_reads_back_as_the_words_that_set_it() {
        let words: Vec<&[u8]> = [
            "HYSTERESIS",
            "0.2",
            "HOLD",
            "3000",
            "RETRY",
            "500",
            "ADMISSION",
            "0.9",
            "2",
            "10",
            "0.5",
            "BBR",
            "backlog",
            "50",
            "FACTOR",
            "backlog",
            "SUM",
            "LEVEL",
            "cpu",
            "0.7",
            "backlog",
            "100",
            "SHARES",
            "1",
            "1",
            "0.5",
            "0.25",
            "LEVEL",
            "cpu",
            "0.9",
            "SHARES",
            "1",
            "0.5",
            "0",
            "0",
        ]
        .iter()
        .map(|word| word.as_bytes())
        .collect();
        let policy = parse_policy(&words).unwrap();
        policy.validate().unwrap();
        assert_eq!(policy.hold, Micros::saturating(3_000_000));
        assert_eq!(policy.levels[0].shares, [WHOLE, WHOLE, 5_000, 2_500]);
        let again = policy_words(&policy);
        let again: Vec<&[u8]> = again.iter().map(Vec::as_slice).collect();
        assert_eq!(again, words);
        assert_eq!(parse_policy(&again).unwrap(), policy);
        // The default policy reads back too.
        let default = policy_words(&Policy::default());
        let default: Vec<&[u8]> = default.iter().map(Vec::as_slice).collect();
        assert_eq!(parse_policy(&default).unwrap(), Policy::default());
    }

    #[test]
    fn each_mistake_in_a_policy_is_named() {
        let error = |words: &[&str]| {
            let words: Vec<&[u8]> = words.iter().map(|word| word.as_bytes()).collect();
            parse_policy(&words)
                .and_then(|p| {
                    p.validate()?;
                    Ok(p)
                })
                .unwrap_err()
                .text()
        };
        assert_eq!(
            error(&["LEVEL", "cpu", "0.8", "SHARES", "1", "1", "1", "1.5"]),
            "ERR a share must be a number from 0 to 1"
        );
        assert!(
            error(&["LEVEL", "gpu", "0.8", "SHARES", "1", "1", "1", "1"])
                .starts_with("ERR unknown factor")
        );
        assert!(error(&[
            "LEVEL", "cpu", "0.8", "SHARES", "1", "1", "1", "0", "LEVEL", "cpu", "0.7", "SHARES",
            "1", "1", "0", "0"
        ])
        .starts_with("ERR levels out of order"));
        assert!(
            error(&["LEVEL", "cpu", "0.8", "SHARES", "0", "1", "1", "1"])
                .starts_with("ERR shares out of order")
        );
        assert_eq!(
            error(&["LEVEL", "cpu", "x", "SHARES", "1", "1", "1", "1"]),
            "ERR a value must be a decimal number, not negative"
        );
        assert_eq!(error(&["LEVEL", "cpu", "0.8"]), CommandError::Syntax.text());
        assert_eq!(
            error(&["HOLD", "100"]),
            "ERR a policy has at least one LEVEL (RL.LOAD.POLICY key DEFAULT sets the default)"
        );
        assert_eq!(error(&["SPEED", "1"]), CommandError::Syntax.text());
        assert!(error(&[
            "BBR",
            "admission",
            "0.1",
            "LEVEL",
            "cpu",
            "0.8",
            "SHARES",
            "1",
            "1",
            "1",
            "1"
        ])
        .starts_with("ERR BBR takes a factor the instances report"));
        assert_eq!(
            error(&["BBR", "cpu", "-1", "LEVEL", "cpu", "0.8", "SHARES", "1", "1", "1", "1"]),
            "ERR a value must be a decimal number, not negative"
        );
    }
}
