//! `RL.ALL numkeys key [key ...] THROTTLE max_burst count period [WARMUP period] | WINDOW limit
//! window [FIXED | SLIDING | BUCKETS n | ANCHORED] | LOG limit window | LEASE limit lease | LOAD
//! priority [...] [quantity] [S | MS | US] [DETAILS] [BLOCK duration] [DELAY max_wait | AT_MOST
//! | FORCE] [REFUND]`: several limits, one atomic all-or-nothing decision; and `RL.ALL_RO`, the
//! same decision without writing. Each limiter is, in key order, one of
//!
//! - `THROTTLE max_burst count period [WARMUP period]` (GCRA, as `CL.THROTTLE`),
//! - `WINDOW limit window [FIXED | SLIDING | BUCKETS n | ANCHORED]` (as `RL.WINDOW`),
//! - `LOG limit window` (as `RL.LOG`),
//! - `LEASE limit lease` (as `RL.ACQUIRE`),
//! - `LOAD priority` (the load gate of a service, `RL.LOAD.*`),
//!
//! on the same state as the single commands. The request is admitted, and charged to every
//! limiter, only if every limiter admits it; otherwise nothing is charged anywhere. With a
//! `LEASE`, the lease is taken only if every rate admits, and a rate is charged only if the
//! lease is granted: the reply's sixth integer is the lease's id.

use std::ffi::{c_int, CStr, CString};
use std::sync::OnceLock;

use crate::core::all_or_none::combined;
use crate::core::engine::{Call, MAX_LIMITERS};
use crate::core::lease::LeaseLimiter;
use crate::core::limiter::Limiter;
use crate::core::load::{LoadGate, Priority};
use crate::core::time::{Rounding, Unit};
use crate::core::verdict::Verdict;
use crate::error::CommandError;
use crate::options::{integer_argument, parse_integer, Keyword, Tail};
use crate::redis::call::{Details, Invocation, LimiterReply, Outcome, Reply};
use crate::redis::clock;
use crate::redis::registration::{block_keywords, block_usage, Arg, ArgKind, Mode};
use crate::redis::store;

use super::grammar::{limiting_args, parse_options, CommonOptions};
use super::limiting::{call_seed, request, sixth_field};
use super::top;
use super::window::{algorithm_keyword, ALGORITHM_ARG};
use super::{log, throttle, window};

/// The command's name, `numkeys`, a key and its limiter (`LOAD priority`, the shortest).
pub(super) const REQUIRED_ARGUMENTS: c_int = 5;

pub(super) const COMPLEXITY: &CStr = c"O(N) for N limiters (as each limiter's own command)";

pub(super) const ARGS: &[Arg] = limiting_args!(
    [
        Arg::new(c"numkeys", ArgKind::Integer),
        Arg::new(c"key", ArgKind::Key).multiple(),
        Arg::one_of(
            c"limiter",
            &[
                Arg::block(
                    c"throttle",
                    &[
                        Arg::token(c"THROTTLE"),
                        Arg::new(c"max_burst", ArgKind::Integer),
                        Arg::new(c"count", ArgKind::Integer),
                        Arg::new(c"period", ArgKind::Integer),
                        throttle::WARMUP_ARG,
                    ],
                ),
                Arg::block(
                    c"window",
                    &[
                        Arg::token(c"WINDOW"),
                        Arg::new(c"limit", ArgKind::Integer),
                        Arg::new(c"window", ArgKind::Integer),
                        ALGORITHM_ARG,
                    ],
                ),
                Arg::block(
                    c"log",
                    &[
                        Arg::token(c"LOG"),
                        Arg::new(c"limit", ArgKind::Integer),
                        Arg::new(c"window", ArgKind::Integer),
                    ],
                ),
                Arg::block(
                    c"lease",
                    &[
                        Arg::token(c"LEASE"),
                        Arg::new(c"limit", ArgKind::Integer),
                        Arg::new(c"lease", ArgKind::Integer),
                    ],
                ),
                Arg::block(
                    c"load",
                    &[Arg::token(c"LOAD"), Arg::new(c"priority", ArgKind::String)],
                ),
            ],
        )
        .multiple(),
    ],
    [Arg::token(c"DETAILS").optional()]
);

/// A limiter as given, before the unit is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Params {
    Throttle(throttle::Params),
    Window(window::Params),
    Log(log::Params),
    /// `LEASE limit lease`, as given.
    Lease(i64, i64),
    /// `LOAD priority`.
    Load(Priority),
}

impl Params {
    fn limiter(&self, unit: Unit) -> Result<Limiter, CommandError> {
        match *self {
            Params::Throttle(params) => params.limiter(unit),
            Params::Window(params) => params.limiter(unit),
            Params::Log(params) => params.limiter(unit),
            Params::Lease(limit, lease) => {
                Ok(Limiter::Lease(LeaseLimiter::new(limit, lease, unit)?))
            }
            Params::Load(priority) => Ok(Limiter::Load(LoadGate { priority })),
        }
    }
}

/// A parsed call: its limiters (as many as keys, in order) and options.
struct Parsed<const N: usize> {
    params: [Option<Params>; N],
    keys: usize,
    options: CommonOptions,
    details: bool,
}

pub(super) fn all(call: &Invocation, mode: Mode) -> Result<Reply, CommandError> {
    let keys = numkeys(call.args.get(1).copied())?;
    match keys {
        1 => run_sized::<1>(call, keys, mode),
        2 => run_sized::<2>(call, keys, mode),
        3 | 4 => run_sized::<4>(call, keys, mode),
        5..=8 => run_sized::<8>(call, keys, mode),
        _ => run_sized::<MAX_LIMITERS>(call, keys, mode),
    }
}

/// Runs the call with working arrays sized for its number of keys (at most `N`), so that
/// two limiters pay for two, not for the sixteen a call can name.
fn run_sized<const N: usize>(
    call: &Invocation,
    keys: usize,
    mode: Mode,
) -> Result<Reply, CommandError> {
    let parsed = parse::<N>(keys, &call.args[2..])?;
    let (keys, unit) = (parsed.keys, parsed.options.unit);
    let limiter_at = |index: usize| -> Result<Limiter, CommandError> {
        parsed.params[index]
            .ok_or(CommandError::INTERNAL)?
            .limiter(unit)
    };
    // Filled up to `keys`, the rest copies of the first (unused).
    let mut limiters = [limiter_at(0)?; N];
    for (index, limiter) in limiters.iter_mut().enumerate().take(keys).skip(1) {
        *limiter = limiter_at(index)?;
    }
    let request = request(&parsed.options, mode, &limiters[..keys])?;
    let engine_call = Call {
        limiters: &limiters[..keys],
        request,
        now: clock::now(),
        write: mode == Mode::Write,
        seed: call_seed(&limiters[..keys]),
    };
    let mut verdicts = [Verdict::default(); N];
    let verdicts = &mut verdicts[..keys];
    let settled = store::decide_on_keys::<N>(call, 2, &engine_call, verdicts)?;
    let verdicts = &*verdicts;
    let details = parsed.details.then(|| {
        let mut details = Box::new(Details {
            fields: [[0; 5]; MAX_LIMITERS],
            len: verdicts.len(),
        });
        for (fields, verdict) in details.fields.iter_mut().zip(verdicts) {
            *fields = verdict.to_reply(unit, Rounding::Up);
        }
        details
    });
    let all = match settled.load {
        Some(load) => through_the_gate(&limiters[..keys], verdicts, load.shed),
        None => combined(verdicts),
    };
    let outcome = match settled.load {
        Some(load) if load.shed => Outcome::Shed,
        _ => parsed.options.outcome(all.limited, &settled),
    };
    if outcome == Outcome::Limited && mode == Mode::Write {
        let refused = verdicts.iter().map(|verdict| verdict.limited);
        top::record_refusals(call, 2, refused, engine_call.now);
    }
    Ok(Reply::Limiter(LimiterReply {
        fields: all.to_reply(unit, Rounding::Up),
        extra: sixth_field(&limiters[..keys], &parsed.options, &settled),
        load: settled
            .load
            .map(|load| if load.shed { i64::from(load.level) } else { 0 }),
        details,
        outcome,
    }))
}

/// The reply of a call with a load gate: the other limiters' (the gate has no limit or
/// remaining of its own), refused with the gate's wait when the gate shed the request;
/// the gate's own when it is the only limiter.
fn through_the_gate(limiters: &[Limiter], verdicts: &[Verdict], shed: bool) -> Verdict {
    let gate = limiters
        .iter()
        .position(|limiter| matches!(limiter, Limiter::Load(_)))
        .map(|index| verdicts[index])
        .unwrap_or_default();
    let mut others = [Verdict::default(); MAX_LIMITERS];
    let mut count = 0;
    for (limiter, verdict) in limiters.iter().zip(verdicts) {
        if !matches!(limiter, Limiter::Load(_)) {
            others[count] = *verdict;
            count += 1;
        }
    }
    if count == 0 {
        return gate;
    }
    let rest = combined(&others[..count]);
    if shed {
        Verdict {
            limited: true,
            retry_after: gate.retry_after,
            ..rest
        }
    } else {
        rest
    }
}

/// `numkeys`: how many keys (and limiters) the call names.
fn numkeys(arg: Option<&[u8]>) -> Result<usize, CommandError> {
    let arg = arg.ok_or(CommandError::WrongArity)?;
    parse_integer(arg)
        .filter(|keys| (1..=MAX_LIMITERS as i64).contains(keys))
        .map(|keys| keys as usize)
        .ok_or(CommandError::Message(
            c"ERR numkeys must be an integer from 1 to 16",
        ))
}

/// Parses the arguments after `numkeys`, for a call of `keys` keys (at most `N`).
fn parse<const N: usize>(keys: usize, args: &[&[u8]]) -> Result<Parsed<N>, CommandError> {
    if keys > N {
        return Err(CommandError::INTERNAL);
    }
    if args.len() < keys {
        return Err(CommandError::Message(
            c"ERR numkeys is more than the keys given",
        ));
    }
    let (key_names, mut rest) = args.split_at(keys);
    if !distinct(key_names) {
        return Err(CommandError::Message(
            c"ERR RL.ALL names the same key twice",
        ));
    }
    let mut params = [None; N];
    for slot in &mut params[..keys] {
        let (&keyword, after) = rest.split_first().ok_or(CommandError::Message(
            c"ERR fewer limiters than keys: give one limiter per key",
        ))?;
        let (parsed, taken) = limiter(keyword, after)?;
        *slot = Some(parsed);
        rest = &after[taken..];
    }
    let gates = params[..keys]
        .iter()
        .filter(|params| matches!(params, Some(Params::Load(_))))
        .count();
    if gates > 1 {
        return Err(CommandError::Message(
            c"ERR at most one LOAD in a call: one service's level decides",
        ));
    }
    if rest.first().is_some_and(|&next| is_limiter_keyword(next)) {
        return Err(CommandError::Message(
            c"ERR more limiters than keys: give one limiter per key",
        ));
    }
    let mut details = false;
    let options = parse_options(rest, |keyword, _| {
        if keyword != Keyword::new("DETAILS") {
            return Ok(false);
        }
        if std::mem::replace(&mut details, true) {
            return Err(CommandError::Syntax);
        }
        Ok(true)
    })?;
    Ok(Parsed {
        params,
        keys,
        options,
        details,
    })
}

const THROTTLE: Keyword = Keyword::new("THROTTLE");
const WINDOW: Keyword = Keyword::new("WINDOW");
const LOG: Keyword = Keyword::new("LOG");
const LEASE: Keyword = Keyword::new("LEASE");
const LOAD: Keyword = Keyword::new("LOAD");

fn is_limiter_keyword(arg: &[u8]) -> bool {
    // Most arguments checked are numbers: the first letter rules them out at once.
    matches!(arg.first(), Some(b'T' | b't' | b'W' | b'w' | b'L' | b'l'))
        && Keyword::read(arg)
            .is_some_and(|keyword| [THROTTLE, WINDOW, LOG, LEASE, LOAD].contains(&keyword))
}

/// The limiters `RL.ALL` takes, in the order of [`ARGS`]' alternatives.
const LIMITERS: [Keyword; 5] = [THROTTLE, WINDOW, LOG, LEASE, LOAD];

/// What `LOAD`'s priority may be, after its name in the errors.
const PRIORITY_NAMES: &str = ": critical_plus, critical, sheddable_plus or sheddable (or 0 to 3)";

/// `ERR THROTTLE takes max_burst count period [WARMUP period]` and the like: what limiter
/// `index` of [`LIMITERS`] takes, rendered from [`ARGS`] once (never written by hand, so that
/// it follows the grammar); `LOAD` names the priorities too.
fn takes(index: usize) -> &'static CStr {
    static MESSAGES: [OnceLock<CString>; LIMITERS.len()] =
        [const { OnceLock::new() }; LIMITERS.len()];
    MESSAGES[index].get_or_init(|| {
        let keyword = block_keywords(ARGS, c"limiter")[index];
        let arguments = block_usage(ARGS, keyword).unwrap_or_default();
        let names = if LIMITERS[index] == LOAD {
            PRIORITY_NAMES
        } else {
            ""
        };
        let line = format!("ERR {} takes {arguments}{names}", keyword.to_string_lossy());
        CString::new(line).unwrap_or_default()
    })
}

/// `ERR unknown limiter: expected THROTTLE, WINDOW, LOG, LEASE or LOAD`, from [`ARGS`].
fn unknown_limiter() -> &'static CStr {
    static MESSAGE: OnceLock<CString> = OnceLock::new();
    MESSAGE.get_or_init(|| {
        let names: Vec<String> = block_keywords(ARGS, c"limiter")
            .iter()
            .map(|keyword| keyword.to_string_lossy().into_owned())
            .collect();
        let (last, first) = names
            .split_last()
            .map_or(("", &[][..]), |(l, f)| (l.as_str(), f));
        let line = format!(
            "ERR unknown limiter: expected {} or {last}",
            first.join(", ")
        );
        CString::new(line).unwrap_or_default()
    })
}

/// `ERR no such priority: ...`.
fn no_such_priority() -> &'static CStr {
    static MESSAGE: OnceLock<CString> = OnceLock::new();
    MESSAGE.get_or_init(|| {
        CString::new(format!("ERR no such priority{PRIORITY_NAMES}")).unwrap_or_default()
    })
}

/// One limiter, `keyword` then its arguments from `args`: the parameters, and how many
/// arguments they took.
fn limiter(keyword: &[u8], args: &[&[u8]]) -> Result<(Params, usize), CommandError> {
    let keyword = Keyword::read(keyword);
    let Some(index) = LIMITERS.iter().position(|known| Some(*known) == keyword) else {
        return Err(CommandError::Message(unknown_limiter()));
    };
    let needs = |count: usize| {
        if args.len() < count || args[..count].iter().any(|&arg| is_limiter_keyword(arg)) {
            Err(CommandError::Message(takes(index)))
        } else {
            Ok(())
        }
    };
    match LIMITERS[index] {
        THROTTLE => {
            needs(3)?;
            let mut params = throttle::Params::parse(&args[..3])?;
            let mut tail = Tail::new(&args[3..]);
            if let Some(next) = tail.next_argument() {
                let warmup =
                    Keyword::read(next).and_then(|k| throttle::warmup_keyword(k, &mut tail));
                if let Some(warmup) = warmup {
                    params.warmup = Some(warmup?);
                    return Ok((Params::Throttle(params), 3 + tail.read()));
                }
            }
            Ok((Params::Throttle(params), 3))
        }
        WINDOW => {
            needs(2)?;
            let mut params = window::Params::parse(args[0], args[1])?;
            let mut tail = Tail::new(&args[2..]);
            if let Some(next) = tail.next_argument() {
                let algorithm = Keyword::read(next).and_then(|k| algorithm_keyword(k, &mut tail));
                if let Some(algorithm) = algorithm {
                    params.algorithm = Some(algorithm?);
                    return Ok((Params::Window(params), 2 + tail.read()));
                }
            }
            Ok((Params::Window(params), 2))
        }
        LOG => {
            needs(2)?;
            Ok((Params::Log(log::Params::parse(args[0], args[1])?), 2))
        }
        LOAD => {
            needs(1)?;
            let priority =
                Priority::parse(args[0]).ok_or(CommandError::Message(no_such_priority()))?;
            Ok((Params::Load(priority), 1))
        }
        _ => {
            needs(2)?;
            let limit = integer_argument(args[0], c"ERR limit is not an integer or out of range")?;
            let lease = integer_argument(args[1], c"ERR lease is not an integer or out of range")?;
            Ok((Params::Lease(limit, lease), 2))
        }
    }
}

/// Whether no key is given twice.
fn distinct(keys: &[&[u8]]) -> bool {
    keys.iter()
        .enumerate()
        .all(|(i, key)| keys[..i].iter().all(|earlier| earlier != key))
}

#[cfg(test)]
mod tests;
