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
//! - what a take that does not fit now does instead of being refused: `DELAY max_wait`
//!   (wait for it, at most `max_wait` in the call's unit), `AT_MOST` (take what fits, at
//!   least 1) or `FORCE` (take it all and owe the rest); at most one of them, and none with
//!   `REFUND`, nor `DELAY` or `FORCE` with `BLOCK`;
//!
//! and a command can accept keywords of its own (`RL.WINDOW`'s algorithms, `RL.ALL`'s
//! `DETAILS`). The redis-cell form of `CL.THROTTLE` has no keyword, so it keeps its meaning.

use crate::core::request::{Action, Request, Shortfall};
use crate::core::time::{Micros, Unit};
use crate::error::CommandError;

pub use crate::core::packed::parse_integer;

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
    /// `BLOCK duration`.
    pub block: Option<Micros>,
    /// `DELAY max_wait`, `AT_MOST` or `FORCE`.
    pub shortfall: Shortfall,
}

impl Default for CommonOptions {
    fn default() -> Self {
        CommonOptions {
            quantity: 1,
            unit: Unit::Seconds,
            refund: false,
            block: None,
            shortfall: Shortfall::Refuse,
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
            shortfall: self.shortfall,
        }
    }
}

/// The reply to a `DELAY` that is not an integer of at least 0.
const DELAY_NOT_AN_INTEGER: CommandError =
    CommandError::Message(c"ERR DELAY must be an integer of at least 0");

/// The reply to a `BLOCK` duration that is not a positive integer.
const BLOCK_NOT_POSITIVE: CommandError =
    CommandError::Message(c"ERR BLOCK must be a positive integer");

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
#[cfg(test)]
pub fn is_keyword(arg: &[u8], keyword: &str) -> bool {
    arg.eq_ignore_ascii_case(keyword.as_bytes())
}

/// An argument read as a keyword: its letters in upper case, packed in one word, so that
/// telling keywords apart costs one comparison each instead of a comparison of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keyword(u64);

impl Keyword {
    /// Units.
    pub const S: Keyword = Keyword::new("S");
    /// Milliseconds.
    pub const MS: Keyword = Keyword::new("MS");
    /// Microseconds.
    pub const US: Keyword = Keyword::new("US");
    /// Give back.
    pub const REFUND: Keyword = Keyword::new("REFUND");
    /// A penalty block.
    pub const BLOCK: Keyword = Keyword::new("BLOCK");
    /// `DELAY`.
    pub const DELAY: Keyword = Keyword::new("DELAY");
    /// `AT_MOST`.
    pub const AT_MOST: Keyword = Keyword::new("AT_MOST");
    /// `FORCE`.
    pub const FORCE: Keyword = Keyword::new("FORCE");

    /// `text`: at most 8 upper-case ASCII letters and underscores.
    pub const fn new(text: &str) -> Keyword {
        let bytes = text.as_bytes();
        assert!(!bytes.is_empty() && bytes.len() <= 8);
        let mut word = 0;
        let mut at = 0;
        while at < bytes.len() {
            assert!(bytes[at].is_ascii_uppercase() || bytes[at] == b'_');
            word |= (bytes[at] as u64) << (8 * at);
            at += 1;
        }
        Keyword(word)
    }

    /// `arg` as a keyword, in any letter case (ASCII letters only, as
    /// [`<[u8]>::eq_ignore_ascii_case`] compares them); `None` when it cannot be one: empty,
    /// longer than 8 bytes, or holding a NUL byte (which would make two lengths pack alike).
    pub fn read(arg: &[u8]) -> Option<Keyword> {
        if arg.is_empty() || arg.len() > 8 {
            return None;
        }
        let mut word = 0;
        for (at, &byte) in arg.iter().enumerate() {
            if byte == 0 {
                return None;
            }
            word |= u64::from(byte.to_ascii_uppercase()) << (8 * at);
        }
        Some(Keyword(word))
    }

    /// The unit it names: `S`, `MS` or `US`.
    pub fn unit(self) -> Option<Unit> {
        match self {
            Keyword::S => Some(Unit::Seconds),
            Keyword::MS => Some(Unit::Milliseconds),
            Keyword::US => Some(Unit::Microseconds),
            _ => None,
        }
    }
}

/// The unit `arg` names: `S`, `MS` or `US`, in any letter case.
pub fn unit_keyword(arg: &[u8]) -> Option<Unit> {
    Keyword::read(arg).and_then(Keyword::unit)
}

/// Parses the optional arguments `tail`. `command_keyword` is offered every keyword that is
/// not one of the shared ones; it returns `Ok(true)` when it took it (and the values it read
/// from the `Tail`). A keyword out of place, repeated, or unknown is a syntax error (the
/// reply names the command's usage).
pub fn parse_options<'a>(
    tail: &'a [&'a [u8]],
    mut command_keyword: impl FnMut(Keyword, &mut Tail<'a>) -> Result<bool, CommandError>,
) -> Result<CommonOptions, CommandError> {
    let mut options = CommonOptions::default();
    let mut unit_given = false;
    let mut block = None;
    let mut delay = None;
    let (mut at_most, mut force) = (false, false);
    let mut tail = Tail::new(tail);
    while let Some(arg) = tail.next_argument() {
        let first = tail.read == 1;
        // No keyword starts like a number: a quantity is recognised before any comparison.
        if first && looks_numeric(arg) {
            options.quantity = parse_quantity(arg)?;
            continue;
        }
        let keyword = Keyword::read(arg).ok_or(CommandError::Syntax)?;
        if let Some(unit) = keyword.unit() {
            if unit_given {
                return Err(CommandError::Syntax);
            }
            unit_given = true;
            options.unit = unit;
        } else if keyword == Keyword::REFUND {
            if options.refund {
                return Err(CommandError::Syntax);
            }
            options.refund = true;
        } else if keyword == Keyword::BLOCK {
            let duration = tail.next_argument().ok_or(CommandError::Syntax)?;
            let duration = parse_integer(duration).filter(|&duration| duration > 0);
            if block.replace(duration.ok_or(BLOCK_NOT_POSITIVE)?).is_some() {
                return Err(CommandError::Syntax);
            }
        } else if keyword == Keyword::DELAY {
            let max_wait = tail.next_argument().ok_or(CommandError::Syntax)?;
            let max_wait = parse_integer(max_wait).filter(|&max_wait| max_wait >= 0);
            if delay
                .replace(max_wait.ok_or(DELAY_NOT_AN_INTEGER)?)
                .is_some()
            {
                return Err(CommandError::Syntax);
            }
        } else if keyword == Keyword::AT_MOST {
            if std::mem::replace(&mut at_most, true) {
                return Err(CommandError::Syntax);
            }
        } else if keyword == Keyword::FORCE {
            if std::mem::replace(&mut force, true) {
                return Err(CommandError::Syntax);
            }
        } else if !command_keyword(keyword, &mut tail)? {
            return Err(CommandError::Syntax);
        }
    }
    options.shortfall = shortfall(&options, block.is_some(), delay, at_most, force)?;
    if let Some(duration) = block {
        if options.refund {
            return Err(CommandError::Message(
                c"ERR REFUND and BLOCK cannot be combined: a refund is never refused",
            ));
        }
        options.block = Some(options.unit.span(duration).ok_or(CommandError::Message(
            c"ERR BLOCK is too long: the limit is 2^63 nanoseconds (292 years)",
        ))?);
    }
    Ok(options)
}

/// The one `DELAY max_wait` (in `options.unit`s), `AT_MOST` or `FORCE` a call may give, or
/// the error that names the two it combines.
fn shortfall(
    options: &CommonOptions,
    block: bool,
    delay: Option<i64>,
    at_most: bool,
    force: bool,
) -> Result<Shortfall, CommandError> {
    let pair = |message: &'static std::ffi::CStr| Err(CommandError::Message(message));
    match (delay, at_most, force) {
        (Some(_), true, _) => {
            return pair(c"ERR DELAY and AT_MOST cannot be combined: a request waits for all of its quantity or takes part of it now")
        }
        (Some(_), _, true) => {
            return pair(c"ERR DELAY and FORCE cannot be combined: a forced request never waits")
        }
        (None, true, true) => {
            return pair(c"ERR AT_MOST and FORCE cannot be combined: a request takes part of its quantity or owes the rest")
        }
        _ => {}
    }
    if delay.is_none() && !at_most && !force {
        return Ok(Shortfall::Refuse);
    }
    if options.refund {
        return pair(if delay.is_some() {
            c"ERR REFUND and DELAY cannot be combined: a refund is never refused"
        } else if at_most {
            c"ERR REFUND and AT_MOST cannot be combined: a refund is never refused"
        } else {
            c"ERR REFUND and FORCE cannot be combined: a refund is never refused"
        });
    }
    if block && delay.is_some() {
        return pair(c"ERR DELAY and BLOCK cannot be combined: a request that may wait is not refused for a penalty");
    }
    if block && force {
        return pair(c"ERR FORCE and BLOCK cannot be combined: a forced request is never refused");
    }
    Ok(match delay {
        Some(max_wait) => {
            Shortfall::Delay(options.unit.span(max_wait).ok_or(CommandError::Message(
                c"ERR DELAY is too long: the limit is 2^63 nanoseconds (292 years)",
            ))?)
        }
        None if at_most => Shortfall::AtMost,
        None => Shortfall::Force,
    })
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

    const SYNTAX: CommandError = CommandError::Syntax;

    fn common(tail: &[&[u8]]) -> Result<CommonOptions, CommandError> {
        parse_options(tail, |_, _| Ok(false))
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

    proptest::proptest! {
        #[test]
        fn integers_parse_as_the_standard_library_reads_strict_decimals(
            text in "[+-]?[0-9]{0,21}|[+-]?[0-9]{0,12}[^0-9][0-9]{0,12}|[+-]?[0-9/:]{4,18}",
        ) {
            // `str::parse` accepts the same strict form: an optional sign, then digits.
            proptest::prop_assert_eq!(parse_integer(text.as_bytes()), text.parse::<i64>().ok());
        }
    }

    proptest::proptest! {
        #[test]
        fn keywords_read_as_byte_comparisons_in_any_case_see_them(
            arg in proptest::collection::vec(proptest::prop_oneof![
                proptest::sample::select(b"sSmMuUrReEfFnNdDbBlLoOcCkKtThHwWiIgG\0\x7f\xc3\xa9@`[{".to_vec()),
                proptest::num::u8::ANY,
            ], 0..10),
        ) {
            for keyword in ["S", "MS", "US", "REFUND", "BLOCK", "FIXED", "SLIDING", "THROTTLE", "WINDOW", "LOG"] {
                proptest::prop_assert_eq!(
                    Keyword::read(&arg) == Some(Keyword::new(keyword)),
                    is_keyword(&arg, keyword),
                    "{:?} {}", arg, keyword
                );
            }
        }
    }

    #[test]
    fn keywords_read_in_every_letter_case_and_only_whole() {
        let keywords = [
            "S", "MS", "US", "LOG", "BLOCK", "FIXED", "REFUND", "SLIDING", "THROTTLE",
        ];
        for keyword in keywords {
            let upper = keyword.as_bytes();
            for cases in 0..1u32 << upper.len() {
                let arg: Vec<u8> = (upper.iter().enumerate())
                    .map(|(at, &byte)| {
                        if cases >> at & 1 == 1 {
                            byte.to_ascii_lowercase()
                        } else {
                            byte
                        }
                    })
                    .collect();
                assert_eq!(Keyword::read(&arg), Some(Keyword::new(keyword)), "{arg:?}");
                let mut longer = arg.clone();
                longer.push(b'S');
                assert_ne!(Keyword::read(&longer), Some(Keyword::new(keyword)));
                assert_ne!(Keyword::read(&arg[1..]), Some(Keyword::new(keyword)));
                assert_ne!(
                    Keyword::read(&arg[..arg.len() - 1]),
                    Some(Keyword::new(keyword))
                );
            }
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
        assert_eq!(options.request(), Request::refund(2));
        let options = common(&[b"Block", b"900", b"ms"]).unwrap();
        assert_eq!(options.block, Some(Micros::saturating(900_000)));
        assert_eq!(
            common(&[b"BLOCK", b"2"]).unwrap().block,
            Some(Micros::saturating(2_000_000))
        );
        assert_eq!(
            common(&[b"US", b"BLOCK", b"7"]).unwrap().block,
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
        assert_eq!(options.quantity, 3);
        assert_eq!(options.unit, Unit::Milliseconds);
    }
}
