//! Argument parsing shared by all commands: strict integers, and one grammar for what
//! follows a command's required arguments:
//!
//! ```text
//! [quantity] [keyword ...]
//! ```
//!
//! `quantity` (default 1) is the first optional argument when present. Keywords follow, in
//! any order, each at most once, in any letter case. Every limiter command takes
//!
//! - a unit keyword, `S` (seconds, the default), `MS` (milliseconds) or `US`
//!   (microseconds), which sets the unit of its period or window argument, of `BLOCK`'s
//!   duration, and of the times in its reply;
//! - `REFUND`: give `quantity` back instead of taking it;
//! - `BLOCK duration`: a refusal because the limit is used up keeps the key refused for
//!   `duration`;
//!
//! and a command can accept keywords of its own (`RL.WINDOW`'s algorithms, `RL.ALL`'s
//! `DETAILS`). The redis-cell form of `CL.THROTTLE` has no keyword, so it keeps its meaning.

use crate::core::request::{Action, Request};
use crate::core::time::{Unit, TICKS_PER_MICROSECOND};
use crate::error::CommandError;

/// Parses a decimal `i64`: an optional `+` or `-`, then ASCII digits, nothing else (no
/// spaces, no fraction, no exponent, no hex). `None` when `arg` is anything else or does
/// not fit.
pub fn parse_integer(arg: &[u8]) -> Option<i64> {
    let (negative, digits) = match arg.split_first()? {
        (b'-', rest) => (true, rest),
        (b'+', rest) => (false, rest),
        _ => (false, arg),
    };
    if digits.is_empty() {
        return None;
    }
    // Accumulated below zero, where i64 reaches one further (i64::MIN).
    let mut value: i64 = 0;
    for &byte in digits {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_sub(i64::from(digit))?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

/// Parses a required integer argument; `not_an_integer` is the error otherwise.
pub fn integer_argument(
    arg: &[u8],
    not_an_integer: &'static std::ffi::CStr,
) -> Result<i64, CommandError> {
    parse_integer(arg).ok_or(CommandError::Message(not_an_integer))
}

/// The optional arguments every command shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommonOptions {
    /// How much this request counts for; 0 is a peek.
    pub quantity: u64,
    /// The unit of the period or window argument, of `BLOCK`, and of the reply's times.
    pub unit: Unit,
    /// `REFUND`: give `quantity` back.
    pub refund: bool,
    /// `BLOCK duration`, in microseconds.
    pub block: Option<i64>,
}

impl Default for CommonOptions {
    fn default() -> Self {
        CommonOptions {
            quantity: 1,
            unit: Unit::Seconds,
            refund: false,
            block: None,
        }
    }
}

impl CommonOptions {
    /// What the call asks of its limiters.
    pub fn request(&self) -> Request {
        Request {
            action: if self.refund {
                Action::Refund
            } else {
                Action::Take
            },
            quantity: self.quantity,
            block: self.block,
        }
    }
}

/// The reply to a `BLOCK` duration that is not a positive integer.
const BLOCK_NOT_POSITIVE: CommandError =
    CommandError::Message(c"ERR BLOCK must be a positive integer");

/// The longest block: 2^63 - 1 nanoseconds, as for periods and windows.
const MAX_BLOCK_MICROS: i64 = i64::MAX / 1_000;

/// The optional arguments still to be read; a command's own keyword takes its value from
/// here.
pub struct Tail<'a> {
    args: &'a [&'a [u8]],
    read: usize,
}

impl<'a> Tail<'a> {
    /// The arguments `args`, none read yet.
    pub fn new(args: &'a [&'a [u8]]) -> Tail<'a> {
        Tail { args, read: 0 }
    }

    /// How many arguments were read.
    pub fn read(&self) -> usize {
        self.read
    }

    /// The next argument, consuming it.
    pub fn next_argument(&mut self) -> Option<&'a [u8]> {
        let arg = self.args.get(self.read).copied();
        self.read += usize::from(arg.is_some());
        arg
    }
}

/// Whether `arg` is `keyword`, in any letter case.
pub fn is_keyword(arg: &[u8], keyword: &str) -> bool {
    arg.eq_ignore_ascii_case(keyword.as_bytes())
}

/// The unit `arg` names: `S`, `MS` or `US`, in any letter case.
pub fn unit_keyword(arg: &[u8]) -> Option<Unit> {
    [
        ("S", Unit::Seconds),
        ("MS", Unit::Milliseconds),
        ("US", Unit::Microseconds),
    ]
    .into_iter()
    .find_map(|(keyword, unit)| is_keyword(arg, keyword).then_some(unit))
}

/// Parses the optional arguments `tail`. `command_keyword` is offered every argument that is
/// not a unit keyword; it returns `Ok(true)` when it took it (and the values it read from
/// the `Tail`). `syntax_error` is the reply for a keyword out of place, repeated, or
/// unknown.
pub fn parse_options<'a>(
    tail: &'a [&'a [u8]],
    syntax_error: CommandError,
    mut command_keyword: impl FnMut(&'a [u8], &mut Tail<'a>) -> Result<bool, CommandError>,
) -> Result<CommonOptions, CommandError> {
    let mut options = CommonOptions::default();
    let mut unit_given = false;
    let mut block = None;
    let mut tail = Tail::new(tail);
    while let Some(arg) = tail.next_argument() {
        let first = tail.read == 1;
        // No keyword starts like a number: a quantity is recognised before any comparison.
        if first && looks_numeric(arg) {
            options.quantity = parse_quantity(arg)?;
        } else if let Some(unit) = unit_keyword(arg) {
            if unit_given {
                return Err(syntax_error);
            }
            unit_given = true;
            options.unit = unit;
        } else if is_keyword(arg, "REFUND") {
            if options.refund {
                return Err(syntax_error);
            }
            options.refund = true;
        } else if is_keyword(arg, "BLOCK") {
            let duration = tail.next_argument().ok_or(syntax_error)?;
            let duration = parse_integer(duration).filter(|&duration| duration > 0);
            if block.replace(duration.ok_or(BLOCK_NOT_POSITIVE)?).is_some() {
                return Err(syntax_error);
            }
        } else if command_keyword(arg, &mut tail)? {
            // Taken by the command.
        } else {
            return Err(syntax_error);
        }
    }
    if let Some(duration) = block {
        if options.refund {
            return Err(CommandError::Message(
                c"ERR REFUND and BLOCK cannot be combined: a refund is never refused",
            ));
        }
        let per_unit = (options.unit.ticks() / TICKS_PER_MICROSECOND) as i64;
        options.block = Some(
            duration
                .checked_mul(per_unit)
                .filter(|&micros| micros <= MAX_BLOCK_MICROS)
                .ok_or(CommandError::Message(
                    c"ERR BLOCK is too long: the limit is 2^63 nanoseconds (292 years)",
                ))?,
        );
    }
    Ok(options)
}

/// Whether `arg` was meant as a number (a quantity) rather than a mistyped keyword.
fn looks_numeric(arg: &[u8]) -> bool {
    arg.first()
        .is_some_and(|&first| first.is_ascii_digit() || first == b'-' || first == b'+')
}

fn parse_quantity(arg: &[u8]) -> Result<u64, CommandError> {
    let quantity = integer_argument(arg, c"ERR quantity is not an integer or out of range")?;
    u64::try_from(quantity).map_err(|_| CommandError::Message(c"ERR quantity must not be negative"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNTAX: CommandError = CommandError::Message(c"ERR syntax error");

    fn common(tail: &[&[u8]]) -> Result<CommonOptions, CommandError> {
        parse_options(tail, SYNTAX, |_, _| Ok(false))
    }

    #[test]
    fn integers_are_strict_decimal() {
        assert_eq!(parse_integer(b"0"), Some(0));
        assert_eq!(parse_integer(b"15"), Some(15));
        assert_eq!(parse_integer(b"+15"), Some(15));
        assert_eq!(parse_integer(b"-15"), Some(-15));
        assert_eq!(parse_integer(b"007"), Some(7));
        assert_eq!(parse_integer(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_integer(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"+",
            b"-",
            b" 1",
            b"1 ",
            b"1.5",
            b"1e3",
            b"0x10",
            b"abc",
            b"9223372036854775808",
            b"18446744073709551615",
            b"1\0",
            b"\xff1",
            b"\xd9\xa1",
        ] {
            assert_eq!(parse_integer(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn nothing_optional_means_one_in_seconds() {
        assert_eq!(common(&[]), Ok(CommonOptions::default()));
        assert_eq!(CommonOptions::default().request(), Request::take(1));
    }

    #[test]
    fn quantity_then_unit_in_any_case() {
        assert_eq!(common(&[b"0"]).unwrap().quantity, 0);
        assert_eq!(
            common(&[b"7", b"ms"]).unwrap(),
            CommonOptions {
                quantity: 7,
                unit: Unit::Milliseconds,
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
        assert_eq!(
            options.request(),
            Request {
                action: Action::Refund,
                quantity: 2,
                block: None
            }
        );
        let options = common(&[b"Block", b"900", b"ms"]).unwrap();
        assert_eq!(options.block, Some(900_000));
        assert_eq!(common(&[b"BLOCK", b"2"]).unwrap().block, Some(2_000_000));
        assert_eq!(common(&[b"US", b"BLOCK", b"7"]).unwrap().block, Some(7));
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
        let options = parse_options(&[b"3", b"BUCKETS", b"60", b"MS"], SYNTAX, |arg, tail| {
            if is_keyword(arg, "buckets") {
                seen = tail.next_argument().and_then(parse_integer);
                return Ok(true);
            }
            Ok(false)
        })
        .unwrap();
        assert_eq!(seen, Some(60));
        assert_eq!(options.quantity, 3);
        assert_eq!(options.unit, Unit::Milliseconds);
    }
}
