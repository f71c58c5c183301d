//! `RL.WINDOW key limit window [quantity] [FIXED | SLIDING | BUCKETS n] [S | MS | US]`:
//! window counters, one string key per limiter whatever the algorithm.

use std::cell::RefCell;
use std::ffi::{c_int, CStr};

use crate::args::{integer_argument, is_keyword, parse_integer, parse_options, CommonOptions};
use crate::core::time::Rounding;
use crate::core::window::{is_window_length, Algorithm, Scratch, StateError, WindowLimiter};
use crate::error::CommandError;
use crate::redis::clock;
use crate::redis::handler::{self, Invocation, LimiterReply};
use crate::redis::key::Access;
use crate::redis::metadata::{Arg, ArgKind, CommandSpec};
use crate::redis::stats::CommandStats;
use crate::redis::string_state::{decide_on_string_key, Decision};

use super::{
    limiter_reply, window_error, BUCKETS_RANGE, LIMITER_ACL_CATEGORIES, LIMITER_FLAGS,
    LIMITER_KEY_FLAGS, UNIT_ARG,
};

/// The command's name.
const NAME: &CStr = c"rl.window";

/// Its counters, for `INFO`.
pub static STATS: CommandStats = CommandStats::new(NAME);

/// The command's registration.
pub static SPEC: CommandSpec = CommandSpec {
    name: NAME,
    handler: rl_window,
    flags: LIMITER_FLAGS,
    arity: -(REQUIRED_ARGUMENTS as c_int),
    summary: c"Rate-limits a key with a fixed window, a sliding-window counter or a rolling window of buckets",
    complexity: c"O(1) for FIXED and SLIDING, O(N) for BUCKETS N",
    since: c"0.1.0",
    acl_categories: LIMITER_ACL_CATEGORIES,
    in_module_category: true,
    key_flags: LIMITER_KEY_FLAGS,
    args: &[
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"limit", ArgKind::Integer),
        Arg::new(c"window", ArgKind::Integer),
        Arg::new(c"quantity", ArgKind::Integer).optional(),
        Arg::one_of(
            c"algorithm",
            &[
                Arg::token(c"FIXED"),
                Arg::token(c"SLIDING"),
                Arg::new(c"buckets", ArgKind::Integer).after_token(c"BUCKETS"),
            ],
        )
        .optional(),
        UNIT_ARG,
    ],
    event: NAME,
    stats: Some(&STATS),
};

/// The command's name and its three required arguments.
const REQUIRED_ARGUMENTS: usize = 4;

const USAGE: CommandError = CommandError::Message(
    c"ERR syntax error. Usage: RL.WINDOW key limit window [quantity] [FIXED|SLIDING|BUCKETS n] [S|MS|US]",
);

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

handler::command_callback!(rl_window, SPEC, window);

/// The parsed arguments.
#[derive(Debug, PartialEq, Eq)]
struct WindowArgs {
    limit: i64,
    window: i64,
    algorithm: Algorithm,
    options: CommonOptions,
}

/// Parses the arguments after the command's name and key.
fn parse(args: &[&[u8]]) -> Result<WindowArgs, CommandError> {
    let [limit, window, tail @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let limit = integer_argument(limit, c"ERR limit is not an integer or out of range")?;
    let window = integer_argument(window, c"ERR window is not an integer or out of range")?;
    let mut algorithm = None;
    let options = parse_options(tail, USAGE, |arg, tail| {
        let chosen = if is_keyword(arg, "FIXED") {
            Algorithm::Fixed
        } else if is_keyword(arg, "SLIDING") {
            Algorithm::Sliding
        } else if is_keyword(arg, "BUCKETS") {
            let n = tail.next_argument().ok_or(USAGE)?;
            let n = parse_integer(n).and_then(|n| u16::try_from(n).ok());
            Algorithm::Buckets(n.ok_or(BUCKETS_RANGE)?)
        } else {
            return Ok(false);
        };
        if algorithm.replace(chosen).is_some() {
            return Err(USAGE);
        }
        Ok(true)
    })?;
    Ok(WindowArgs {
        limit,
        window,
        algorithm: algorithm.unwrap_or(Algorithm::Sliding),
        options,
    })
}

fn unusable(error: StateError) -> CommandError {
    match error {
        StateError::Foreign => CommandError::WRONG_TYPE,
        StateError::OtherAlgorithm => CommandError::Message(
            c"WRONGTYPE the key holds the state of another RL.WINDOW algorithm",
        ),
    }
}

fn window(call: &Invocation) -> Result<LimiterReply, CommandError> {
    let args = parse(&call.args[2..])?;
    let limiter = WindowLimiter::new(args.limit, args.window, args.options.unit, args.algorithm)
        .map_err(window_error)?;
    let quantity = args.options.quantity;
    let access = Access::for_request(quantity, limiter.limit());
    let verdict = decide_on_string_key(call, access, is_window_length, |stored, new_state| {
        SCRATCH.with_borrow_mut(|scratch| {
            let outcome = limiter
                .apply(stored, clock::now_micros(), quantity, scratch, new_state)
                .map_err(unusable)?;
            Ok(Decision {
                verdict: outcome.verdict,
                expire_at_ms: outcome.expire_at_ms,
            })
        })
    })?;
    Ok(limiter_reply(verdict, &args.options, Rounding::Up))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::time::Unit;
    use crate::core::window::WindowError;

    fn algorithm(args: &[&[u8]]) -> Result<Algorithm, CommandError> {
        parse(args).map(|args| args.algorithm)
    }

    #[test]
    fn sliding_is_the_default_and_keywords_take_any_case() {
        let args = parse(&[b"10", b"60"]).unwrap();
        assert_eq!(
            args,
            WindowArgs {
                limit: 10,
                window: 60,
                algorithm: Algorithm::Sliding,
                options: CommonOptions {
                    quantity: 1,
                    unit: Unit::Seconds
                },
            }
        );
        assert_eq!(algorithm(&[b"10", b"60", b"fixed"]), Ok(Algorithm::Fixed));
        assert_eq!(
            algorithm(&[b"10", b"60", b"Sliding"]),
            Ok(Algorithm::Sliding)
        );
        assert_eq!(
            algorithm(&[b"10", b"60", b"buckets", b"60"]),
            Ok(Algorithm::Buckets(60))
        );
    }

    #[test]
    fn quantity_first_then_keywords_in_any_order() {
        let args = parse(&[b"10", b"500", b"3", b"MS", b"BUCKETS", b"5"]).unwrap();
        assert_eq!(args.algorithm, Algorithm::Buckets(5));
        assert_eq!(args.options.quantity, 3);
        assert_eq!(args.options.unit, Unit::Milliseconds);
        assert_eq!(
            parse(&[b"10", b"60", b"0", b"FIXED"])
                .unwrap()
                .options
                .quantity,
            0
        );
    }

    #[test]
    fn bad_arguments_are_named() {
        let error = |args: &[&[u8]]| parse(args).unwrap_err().text();
        assert_eq!(
            error(&[b"ten", b"60"]),
            "ERR limit is not an integer or out of range"
        );
        assert_eq!(
            error(&[b"10", b"1.5"]),
            "ERR window is not an integer or out of range"
        );
        assert_eq!(error(&[b"10", b"60", b"BUCKETS"]), USAGE.text());
        for bad in [&b"-1"[..], b"65536", b"x", b""] {
            assert_eq!(
                error(&[b"10", b"60", b"BUCKETS", bad]),
                BUCKETS_RANGE.text()
            );
        }
        assert_eq!(error(&[b"10", b"60", b"FIXED", b"SLIDING"]), USAGE.text());
        assert_eq!(error(&[b"10", b"60", b"FIXED", b"FIXED"]), USAGE.text());
        assert_eq!(error(&[b"10", b"60", b"FIXED", b"3"]), USAGE.text());
        assert_eq!(error(&[b"10", b"60", b"LEAKY"]), USAGE.text());
        assert_eq!(parse(&[b"10"]), Err(CommandError::WrongArity));
    }

    #[test]
    fn invalid_parameters_get_their_own_messages() {
        let check = |limit, window, algorithm, expected: &str| {
            let error = WindowLimiter::new(limit, window, Unit::Seconds, algorithm)
                .map_err(window_error)
                .unwrap_err();
            assert_eq!(error.text(), expected);
        };
        check(0, 1, Algorithm::Fixed, "ERR limit must be positive");
        check(1, 0, Algorithm::Fixed, "ERR window must be positive");
        check(1, 1, Algorithm::Buckets(0), BUCKETS_RANGE.text());
        check(1, 1, Algorithm::Buckets(3_601), BUCKETS_RANGE.text());
        check(
            1,
            i64::MAX,
            Algorithm::Fixed,
            window_error(WindowError::WindowTooLong).text(),
        );
        let error = WindowLimiter::new(1, 5, Unit::Microseconds, Algorithm::Buckets(6));
        assert_eq!(
            error.map_err(window_error).unwrap_err().text(),
            "ERR window / BUCKETS must be at least 1 microsecond"
        );
    }
}
