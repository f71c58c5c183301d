//! `CL.THROTTLE key max_burst count period [quantity] [S | MS | US] [WARMUP period] [BLOCK
//! duration] [DELAY max_wait | AT_MOST | FORCE] [REFUND]`: GCRA, with redis-cell's arguments and
//! reply, without its defects; and `CL.THROTTLE_RO`, the same decision without writing.

use std::ffi::{c_int, CStr};

use crate::core::gcra::Gcra;
use crate::core::limiter::Limiter;
use crate::core::params;
use crate::core::time::{Rounding, Unit};
use crate::error::CommandError;
use crate::options::{integer_argument, Keyword, Tail};
use crate::redis::call::{Invocation, Reply};
use crate::redis::registration::{Arg, ArgKind, Mode};

use super::grammar::{limiting_args, parse_options, CommonOptions};
use super::limiting::one_limiter;

/// The command's name and its four required arguments.
pub(super) const REQUIRED_ARGUMENTS: c_int = 5;

pub(super) const SUMMARY: &CStr =
    c"Rate-limits a key with GCRA (a leaky bucket), compatible with redis-cell";

pub(super) const ARGS: &[Arg] = limiting_args!(
    [
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"max_burst", ArgKind::Integer),
        Arg::new(c"count", ArgKind::Integer),
        Arg::new(c"period", ArgKind::Integer),
    ],
    [WARMUP_ARG]
);

/// `WARMUP period`: a cold limiter's units cost more until `period` of use has warmed it.
pub const WARMUP_ARG: Arg = Arg::new(c"period", ArgKind::Integer)
    .after_token(c"WARMUP")
    .optional();

pub(super) fn throttle(call: &Invocation, mode: Mode) -> Result<Reply, CommandError> {
    let (params, options) = parse(&call.args[2..])?;
    let limiter = params.limiter(options.unit)?;
    one_limiter(call, limiter, &options, mode, rounding(options.unit))
}

/// Parses the arguments after the command's name and key.
fn parse(args: &[&[u8]]) -> Result<(Params, CommonOptions), CommandError> {
    if args.len() < 3 {
        return Err(CommandError::WrongArity);
    }
    let (required, tail) = args.split_at(3);
    let mut params = Params::parse(required)?;
    let options = parse_options(tail, |keyword, tail| {
        let Some(warmup) = warmup_keyword(keyword, tail) else {
            return Ok(false);
        };
        if params.warmup.replace(warmup?).is_some() {
            return Err(CommandError::Syntax);
        }
        Ok(true)
    })?;
    Ok((params, options))
}

/// `WARMUP period` (taking `period` from `tail`) when `keyword` is `WARMUP`;
/// `syntax_error` when it has no value.
pub fn warmup_keyword(keyword: Keyword, tail: &mut Tail) -> Option<Result<i64, CommandError>> {
    const WARMUP: Keyword = Keyword::new("WARMUP");
    if keyword != WARMUP {
        return None;
    }
    Some(
        tail.next_argument()
            .ok_or(CommandError::Syntax)
            .and_then(|period| {
                integer_argument(period, c"ERR WARMUP is not an integer or out of range")
            }),
    )
}

/// GCRA's parameters as given: `max_burst count period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    max_burst: i64,
    count: i64,
    period: i64,
    /// `WARMUP period`, in the call's unit.
    pub warmup: Option<i64>,
}

impl Params {
    /// Parses `max_burst count period`.
    pub fn parse(args: &[&[u8]]) -> Result<Params, CommandError> {
        let [max_burst, count, period] = args else {
            return Err(CommandError::WrongArity);
        };
        Ok(Params {
            max_burst: integer_argument(
                max_burst,
                c"ERR max_burst is not an integer or out of range",
            )?,
            count: integer_argument(count, c"ERR count is not an integer or out of range")?,
            period: integer_argument(period, c"ERR period is not an integer or out of range")?,
            warmup: None,
        })
    }

    /// The limiter, with `period` and `WARMUP` in `unit`s.
    pub fn limiter(&self, unit: Unit) -> Result<Limiter, CommandError> {
        let gcra = Gcra::new(self.max_burst, self.count, self.period, unit)?;
        Ok(Limiter::Throttle(match self.warmup {
            Some(period) => gcra.with_warmup(params::warmup(period, unit)?.ticks()),
            None => gcra,
        }))
    }
}

/// Times in seconds round as redis-cell does, for drop-in compatibility; finer units round
/// up, so that waiting `retry_after` is always enough.
fn rounding(unit: Unit) -> Rounding {
    match unit {
        Unit::Seconds => Rounding::RedisCell,
        Unit::Milliseconds | Unit::Microseconds => Rounding::Up,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redis_cell_form_parses_unchanged() {
        assert_eq!(
            parse(&[b"15", b"30", b"60"]),
            Ok((
                Params {
                    max_burst: 15,
                    count: 30,
                    period: 60,
                    warmup: None,
                },
                CommonOptions::default()
            ))
        );
        assert_eq!(
            parse(&[b"4", b"1", b"1", b"6"]).unwrap().1.request.quantity,
            6
        );
    }

    #[test]
    fn a_unit_keyword_follows() {
        let (params, options) = parse(&[b"15", b"30", b"500", b"2", b"ms"]).unwrap();
        assert_eq!(params.period, 500);
        assert_eq!(options.unit, Unit::Milliseconds);
        assert_eq!(options.request.quantity, 2);
        assert_eq!(
            parse(&[b"1", b"1", b"250", b"US"]).unwrap().1.unit,
            Unit::Microseconds
        );
    }

    #[test]
    fn each_bad_argument_is_named() {
        let error = |args: &[&[u8]]| parse(args).unwrap_err().text();
        assert_eq!(
            error(&[b"1.5", b"30", b"60"]),
            "ERR max_burst is not an integer or out of range"
        );
        assert_eq!(
            error(&[b"15", b"abc", b"60"]),
            "ERR count is not an integer or out of range"
        );
        assert_eq!(
            error(&[b"15", b"30", b""]),
            "ERR period is not an integer or out of range"
        );
        assert_eq!(
            error(&[b"15", b"30", b"60", b"1", b"2"]),
            CommandError::Syntax.text()
        );
        assert_eq!(parse(&[b"15", b"30"]), Err(CommandError::WrongArity));
    }

    #[test]
    fn invalid_parameters_get_their_own_messages() {
        let check = |b, c, p, expected: &str| {
            let params = Params {
                max_burst: b,
                count: c,
                period: p,
                warmup: None,
            };
            assert_eq!(params.limiter(Unit::Seconds).unwrap_err().text(), expected);
        };
        check(-1, 1, 1, "ERR max_burst must not be negative");
        check(1, 0, 1, "ERR count must be positive");
        check(1, 1, -1, "ERR period must be positive");
        check(
            i64::MAX,
            1,
            1,
            "ERR (max_burst + 1) * period / count is too long: the limit is 2^63 nanoseconds (292 years)",
        );
    }
}
