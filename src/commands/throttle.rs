//! `CL.THROTTLE key max_burst count period [quantity] [S | MS | US]`: GCRA, with
//! redis-cell's arguments and reply, without its defects.

use std::ffi::{c_int, CStr};

use crate::args::{integer_argument, parse_options, CommonOptions};
use crate::core::codec::{decode_gcra, encode_gcra, is_gcra_length};
use crate::core::gcra::{Gcra, GcraError};
use crate::core::time::{ceil_millis, Rounding, Unit};
use crate::error::CommandError;
use crate::redis::clock;
use crate::redis::handler::{self, Invocation, LimiterReply};
use crate::redis::key::Access;
use crate::redis::metadata::{Arg, ArgKind, CommandSpec};
use crate::redis::stats::CommandStats;
use crate::redis::string_state::{decide_on_string_key, Decision};

use super::{limiter_reply, LIMITER_ACL_CATEGORIES, LIMITER_FLAGS, LIMITER_KEY_FLAGS, UNIT_ARG};

/// The command's name.
const NAME: &CStr = c"cl.throttle";

/// Its counters, for `INFO`.
pub static STATS: CommandStats = CommandStats::new(NAME);

/// The command's registration.
pub static SPEC: CommandSpec = CommandSpec {
    name: NAME,
    handler: cl_throttle,
    flags: LIMITER_FLAGS,
    arity: -(REQUIRED_ARGUMENTS as c_int),
    summary: c"Rate-limits a key with GCRA (a leaky bucket), compatible with redis-cell",
    complexity: c"O(1)",
    since: c"0.1.0",
    acl_categories: LIMITER_ACL_CATEGORIES,
    in_module_category: true,
    key_flags: LIMITER_KEY_FLAGS,
    args: &[
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"max_burst", ArgKind::Integer),
        Arg::new(c"count", ArgKind::Integer),
        Arg::new(c"period", ArgKind::Integer),
        Arg::new(c"quantity", ArgKind::Integer).optional(),
        UNIT_ARG,
    ],
    event: NAME,
    stats: Some(&STATS),
};

/// The command's name and its four required arguments.
const REQUIRED_ARGUMENTS: usize = 5;

const USAGE: CommandError = CommandError::Message(
    c"ERR syntax error. Usage: CL.THROTTLE key max_burst count period [quantity] [S|MS|US]",
);

handler::command_callback!(cl_throttle, SPEC, throttle);

/// The parsed arguments.
#[derive(Debug, PartialEq, Eq)]
struct ThrottleArgs {
    max_burst: i64,
    count: i64,
    period: i64,
    options: CommonOptions,
}

/// Parses the arguments after the command's name and key.
fn parse(args: &[&[u8]]) -> Result<ThrottleArgs, CommandError> {
    let [max_burst, count, period, tail @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    Ok(ThrottleArgs {
        max_burst: integer_argument(
            max_burst,
            c"ERR max_burst is not an integer or out of range",
        )?,
        count: integer_argument(count, c"ERR count is not an integer or out of range")?,
        period: integer_argument(period, c"ERR period is not an integer or out of range")?,
        options: parse_options(tail, USAGE, |_, _| Ok(false))?,
    })
}

fn invalid(error: GcraError) -> CommandError {
    CommandError::Message(match error {
        GcraError::NegativeBurst => c"ERR max_burst must not be negative",
        GcraError::NonPositiveCount => c"ERR count must be positive",
        GcraError::NonPositivePeriod => c"ERR period must be positive",
        GcraError::RateTooHigh => c"ERR rate too high: count / period exceeds 2^24 per nanosecond",
        GcraError::BurstTooLong => {
            c"ERR (max_burst + 1) * period / count is too long: the limit is 2^63 nanoseconds (292 years)"
        }
    })
}

/// Times in seconds round as redis-cell does, for drop-in compatibility; finer units round
/// up, so that waiting `retry_after` is always enough.
fn rounding(unit: Unit) -> Rounding {
    match unit {
        Unit::Seconds => Rounding::RedisCell,
        Unit::Milliseconds | Unit::Microseconds => Rounding::Up,
    }
}

fn throttle(call: &Invocation) -> Result<LimiterReply, CommandError> {
    let args = parse(&call.args[2..])?;
    let gcra =
        Gcra::new(args.max_burst, args.count, args.period, args.options.unit).map_err(invalid)?;
    let quantity = args.options.quantity;
    let access = Access::for_request(quantity, gcra.limit() as u64);
    let verdict = decide_on_string_key(call, access, is_gcra_length, |stored, new_state| {
        let stored = match stored {
            Some(value) => Some(decode_gcra(value).ok_or(CommandError::WRONG_TYPE)?),
            None => None,
        };
        let outcome = gcra.apply(stored, clock::now(), quantity);
        Ok(Decision {
            verdict: outcome.verdict,
            expire_at_ms: outcome.new_tat.map(|tat| {
                new_state.extend_from_slice(&encode_gcra(tat));
                ceil_millis(tat)
            }),
        })
    })?;
    Ok(limiter_reply(
        verdict,
        &args.options,
        rounding(args.options.unit),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redis_cell_form_parses_unchanged() {
        assert_eq!(
            parse(&[b"15", b"30", b"60"]),
            Ok(ThrottleArgs {
                max_burst: 15,
                count: 30,
                period: 60,
                options: CommonOptions {
                    quantity: 1,
                    unit: Unit::Seconds
                },
            })
        );
        assert_eq!(
            parse(&[b"4", b"1", b"1", b"6"]).unwrap().options.quantity,
            6
        );
    }

    #[test]
    fn a_unit_keyword_follows() {
        let args = parse(&[b"15", b"30", b"500", b"2", b"ms"]).unwrap();
        assert_eq!(args.period, 500);
        assert_eq!(args.options.unit, Unit::Milliseconds);
        assert_eq!(args.options.quantity, 2);
        assert_eq!(
            parse(&[b"1", b"1", b"250", b"US"]).unwrap().options.unit,
            Unit::Microseconds
        );
    }

    #[test]
    fn each_bad_argument_is_named() {
        assert_eq!(
            parse(&[b"1.5", b"30", b"60"]).unwrap_err().text(),
            "ERR max_burst is not an integer or out of range"
        );
        assert_eq!(
            parse(&[b"15", b"abc", b"60"]).unwrap_err().text(),
            "ERR count is not an integer or out of range"
        );
        assert_eq!(
            parse(&[b"15", b"30", b""]).unwrap_err().text(),
            "ERR period is not an integer or out of range"
        );
        assert_eq!(
            parse(&[b"15", b"30", b"60", b"1", b"2"])
                .unwrap_err()
                .text(),
            USAGE.text()
        );
        assert_eq!(parse(&[b"15", b"30"]), Err(CommandError::WrongArity));
    }

    #[test]
    fn invalid_parameters_get_their_own_messages() {
        let check = |b, c, p, expected: &str| {
            let error = Gcra::new(b, c, p, Unit::Seconds)
                .map_err(invalid)
                .unwrap_err();
            assert_eq!(error.text(), expected);
        };
        check(-1, 1, 1, "ERR max_burst must not be negative");
        check(1, 0, 1, "ERR count must be positive");
        check(1, 1, -1, "ERR period must be positive");
        check(i64::MAX, 1, 1, invalid(GcraError::BurstTooLong).text());
    }
}
