//! `RL.WINDOW key limit window [quantity] [S | MS | US] [FIXED | SLIDING | BUCKETS n | ANCHORED]
//! [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]`: window counters, one string key per limiter whatever the
//! algorithm; and `RL.WINDOW_RO`, the same decision without writing.

use std::ffi::{c_int, CStr};

use crate::core::limiter::Limiter;
use crate::core::params::BUCKETS_RANGE;
use crate::core::time::{Rounding, Unit};
use crate::core::windows::{Algorithm, WindowLimiter};
use crate::error::CommandError;
use crate::options::{integer_argument, parse_integer, Keyword, Tail};
use crate::redis::call::{Invocation, Reply};
use crate::redis::registration::{Arg, ArgKind, Mode};

use super::grammar::{limiting_args, parse_options, CommonOptions};
use super::limiting::one_limiter;

/// The command's name and its three required arguments.
pub(super) const REQUIRED_ARGUMENTS: c_int = 4;

pub(super) const COMPLEXITY: &CStr = c"O(1) for FIXED, SLIDING and ANCHORED, O(N) for BUCKETS N";

/// The algorithm keyword, for `COMMAND DOCS`.
pub const ALGORITHM_ARG: Arg = Arg::one_of(
    c"algorithm",
    &[
        Arg::token(c"FIXED"),
        Arg::token(c"SLIDING"),
        Arg::new(c"n", ArgKind::Integer).after_token(c"BUCKETS"),
        Arg::token(c"ANCHORED"),
    ],
)
.optional();

pub(super) const ARGS: &[Arg] = limiting_args!(
    [
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"limit", ArgKind::Integer),
        Arg::new(c"window", ArgKind::Integer),
    ],
    [ALGORITHM_ARG]
);

pub(super) fn window(call: &Invocation, mode: Mode) -> Result<Reply, CommandError> {
    let (params, options) = parse(&call.args[2..])?;
    let limiter = params.limiter(options.unit)?;
    one_limiter(call, limiter, &options, mode, Rounding::Up)
}

/// Parses the arguments after the command's name and key.
fn parse(args: &[&[u8]]) -> Result<(Params, CommonOptions), CommandError> {
    let [limit, window, tail @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let mut params = Params::parse(limit, window)?;
    let options = parse_options(tail, |keyword, tail| {
        let Some(chosen) = algorithm_keyword(keyword, tail) else {
            return Ok(false);
        };
        if params.algorithm.replace(chosen?).is_some() {
            return Err(CommandError::Syntax);
        }
        Ok(true)
    })?;
    Ok((params, options))
}

/// `FIXED`, `SLIDING`, `BUCKETS n` (taking `n` from `tail`) or `ANCHORED` when `keyword` is
/// one of them; a syntax error when `BUCKETS` has no value.
pub fn algorithm_keyword(
    keyword: Keyword,
    tail: &mut Tail,
) -> Option<Result<Algorithm, CommandError>> {
    const FIXED: Keyword = Keyword::new("FIXED");
    const SLIDING: Keyword = Keyword::new("SLIDING");
    const BUCKETS: Keyword = Keyword::new("BUCKETS");
    const ANCHORED: Keyword = Keyword::new("ANCHORED");
    match keyword {
        FIXED => Some(Ok(Algorithm::Fixed)),
        ANCHORED => Some(Ok(Algorithm::Anchored)),
        SLIDING => Some(Ok(Algorithm::Sliding)),
        BUCKETS => {
            let Some(n) = tail.next_argument() else {
                return Some(Err(CommandError::Syntax));
            };
            let n = parse_integer(n).and_then(|n| u16::try_from(n).ok());
            Some(
                n.map(Algorithm::Buckets)
                    .ok_or(CommandError::Message(BUCKETS_RANGE)),
            )
        }
        _ => None,
    }
}

/// The window counter's parameters as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    limit: i64,
    window: i64,
    /// `None` for the default, `SLIDING`.
    pub algorithm: Option<Algorithm>,
}

impl Params {
    /// Parses `limit window`.
    pub fn parse(limit: &[u8], window: &[u8]) -> Result<Params, CommandError> {
        Ok(Params {
            limit: integer_argument(limit, c"ERR limit is not an integer or out of range")?,
            window: integer_argument(window, c"ERR window is not an integer or out of range")?,
            algorithm: None,
        })
    }

    /// The limiter, with `window` in `unit`s.
    pub fn limiter(&self, unit: Unit) -> Result<Limiter, CommandError> {
        let algorithm = self.algorithm.unwrap_or(Algorithm::Sliding);
        Ok(Limiter::Window(WindowLimiter::new(
            self.limit,
            self.window,
            unit,
            algorithm,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::params::ParamError;

    fn algorithm(args: &[&[u8]]) -> Result<Algorithm, CommandError> {
        parse(args).map(|(params, _)| params.algorithm.unwrap_or(Algorithm::Sliding))
    }

    #[test]
    fn sliding_is_the_default_and_keywords_take_any_case() {
        let (params, options) = parse(&[b"10", b"60"]).unwrap();
        assert_eq!(
            params,
            Params {
                limit: 10,
                window: 60,
                algorithm: None,
            }
        );
        assert_eq!(options, CommonOptions::default());
        assert_eq!(algorithm(&[b"10", b"60"]), Ok(Algorithm::Sliding));
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
        let (params, options) =
            parse(&[b"10", b"500", b"3", b"MS", b"BUCKETS", b"5", b"refund"]).unwrap();
        assert_eq!(params.algorithm, Some(Algorithm::Buckets(5)));
        assert_eq!(options.request.quantity, 3);
        assert_eq!(options.unit, Unit::Milliseconds);
        assert_eq!(options.request.action, crate::core::request::Action::Refund);
        assert_eq!(
            parse(&[b"10", b"60", b"0", b"FIXED"])
                .unwrap()
                .1
                .request
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
        assert_eq!(
            error(&[b"10", b"60", b"BUCKETS"]),
            CommandError::Syntax.text()
        );
        for bad in [&b"-1"[..], b"65536", b"x", b""] {
            assert_eq!(
                error(&[b"10", b"60", b"BUCKETS", bad]),
                BUCKETS_RANGE.to_str().unwrap()
            );
        }
        assert_eq!(
            error(&[b"10", b"60", b"FIXED", b"SLIDING"]),
            CommandError::Syntax.text()
        );
        assert_eq!(
            error(&[b"10", b"60", b"FIXED", b"FIXED"]),
            CommandError::Syntax.text()
        );
        assert_eq!(
            error(&[b"10", b"60", b"FIXED", b"3"]),
            CommandError::Syntax.text()
        );
        assert_eq!(
            error(&[b"10", b"60", b"LEAKY"]),
            CommandError::Syntax.text()
        );
        assert_eq!(parse(&[b"10"]), Err(CommandError::WrongArity));
    }

    #[test]
    fn invalid_parameters_get_their_own_messages() {
        let check = |limit, window, algorithm, expected: &str| {
            let params = Params {
                limit,
                window,
                algorithm: Some(algorithm),
            };
            assert_eq!(params.limiter(Unit::Seconds).unwrap_err().text(), expected);
        };
        check(0, 1, Algorithm::Fixed, "ERR limit must be positive");
        check(1, 0, Algorithm::Fixed, "ERR window must be positive");
        check(1, 1, Algorithm::Buckets(0), BUCKETS_RANGE.to_str().unwrap());
        check(
            1,
            1,
            Algorithm::Buckets(3_601),
            BUCKETS_RANGE.to_str().unwrap(),
        );
        check(
            1,
            i64::MAX,
            Algorithm::Fixed,
            ParamError::WindowTooLong.message().to_str().unwrap(),
        );
        let params = Params {
            limit: 1,
            window: 5,
            algorithm: Some(Algorithm::Buckets(6)),
        };
        assert_eq!(
            params.limiter(Unit::Microseconds).unwrap_err().text(),
            "ERR window / BUCKETS must be at least 1 microsecond"
        );
    }
}
