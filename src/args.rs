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
#[inline]
pub fn parse_integer(arg: &[u8]) -> Option<i64> {
    let (negative, digits) = match arg.split_first()? {
        (b'-', rest) => (true, rest),
        (b'+', rest) => (false, rest),
        _ => (false, arg),
    };
    if digits.is_empty() {
        return None;
    }
    let value = if digits.len() < 8 {
        // The usual case, kept small enough to inline: at most seven digits, cannot
        // overflow.
        short_digits(digits)?
    } else {
        long_digits(digits, negative)?
    };
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// The value of 1 to 7 ASCII digits.
#[inline(always)]
fn short_digits(digits: &[u8]) -> Option<i64> {
    let len = digits.len();
    if len >= 4 {
        // The first four and the last four, overlapping, checked and converted together in
        // one word: the last four's lowest `len - 4` digits follow the first four.
        let (first, last) = four_digits_twice(
            digits[..4].try_into().unwrap_or_default(),
            digits[len - 4..].try_into().unwrap_or_default(),
        )?;
        let value = match len {
            4 => first,
            5 => first * 10 + last % 10,
            6 => first * 100 + last % 100,
            _ => first * 1_000 + last % 1_000,
        };
        return Some(i64::from(value));
    }
    let mut value = 0;
    for &byte in digits {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + i64::from(digit);
    }
    Some(value)
}

/// Two groups of four ASCII digits, the first of each the most significant, as their
/// values; `None` when any byte is not a digit. Both in one word, as [`eight_digits`] reads
/// eight, stopping at the fours.
#[inline(always)]
fn four_digits_twice(first: [u8; 4], second: [u8; 4]) -> Option<(u32, u32)> {
    let word = u64::from(u32::from_le_bytes(first)) | u64::from(u32::from_le_bytes(second)) << 32;
    let digits = digit_values(word)?;
    let pairs = digits.wrapping_mul(10).wrapping_add(digits >> 8) & 0x00FF_00FF_00FF_00FF;
    let fours = pairs.wrapping_mul(100).wrapping_add(pairs >> 16) & 0x0000_FFFF_0000_FFFF;
    Some((fours as u32, (fours >> 32) as u32))
}

/// The eight bytes of `word` less `'0'` each, when every one is an ASCII digit.
#[inline(always)]
fn digit_values(word: u64) -> Option<u64> {
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    // Each byte is 0x30..=0x39: its high nibble is 3, and adding 6 keeps it 3.
    let high_nibbles = 0xF0F0_F0F0_F0F0_F0F0;
    if word & high_nibbles != ZEROS
        || word.wrapping_add(0x0606_0606_0606_0606) & high_nibbles != ZEROS
    {
        return None;
    }
    Some(word - ZEROS)
}

/// The magnitude of 8 or more ASCII digits, negated back by the caller when `negative`
/// (so `-9223372036854775808` fits); `None` past the i64 range.
#[inline(never)]
fn long_digits(digits: &[u8], negative: bool) -> Option<i64> {
    let len = digits.len();
    if len <= 16 {
        // The first eight and the last eight, overlapping: the last eight's lowest
        // `len - 8` digits follow the first eight. Below 10^16: no overflow.
        let first = eight_digits(digits[..8].try_into().unwrap_or_default())?;
        let last = eight_digits(digits[len - 8..].try_into().unwrap_or_default())?;
        let follow = |scale: u64| first * scale + last % scale;
        let value = match len - 8 {
            0 => first,
            1 => follow(10),
            2 => follow(100),
            3 => follow(1_000),
            4 => follow(10_000),
            5 => follow(100_000),
            6 => follow(1_000_000),
            7 => follow(10_000_000),
            _ => follow(100_000_000),
        };
        return Some(value as i64);
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
        Some(value.wrapping_neg())
    } else {
        value.checked_neg()
    }
}

/// Eight ASCII digits, the first the most significant, as their value; `None` when any byte
/// is not a digit. All eight at once, in one word (SWAR).
#[inline(always)]
fn eight_digits(bytes: [u8; 8]) -> Option<u64> {
    let digits = digit_values(u64::from_le_bytes(bytes))?;
    // Pairs, then fours, then all eight: each step joins neighbours, the earlier (lower
    // byte) one the more significant. No lane overflows into the next (99, 9,999).
    let pairs = digits.wrapping_mul(10).wrapping_add(digits >> 8) & 0x00FF_00FF_00FF_00FF;
    let fours = pairs.wrapping_mul(100).wrapping_add(pairs >> 16) & 0x0000_FFFF_0000_FFFF;
    Some(fours.wrapping_mul(10_000).wrapping_add(fours >> 32) & 0xFFFF_FFFF)
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

    /// `text`: at most 8 upper-case ASCII letters.
    pub const fn new(text: &str) -> Keyword {
        let bytes = text.as_bytes();
        assert!(!bytes.is_empty() && bytes.len() <= 8);
        let mut word = 0;
        let mut at = 0;
        while at < bytes.len() {
            assert!(bytes[at].is_ascii_uppercase());
            word |= (bytes[at] as u64) << (8 * at);
            at += 1;
        }
        Keyword(word)
    }

    /// `arg` as a keyword, in any letter case (ASCII letters only, as
    /// [`<[u8]>::eq_ignore_ascii_case`] compares them); `None` when it cannot be one: empty,
    /// longer than 8 bytes, or holding a NUL byte (which would make two lengths pack alike).
    #[inline(always)]
    pub fn read(arg: &[u8]) -> Option<Keyword> {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGHS: u64 = 0x8080_8080_8080_8080;
        if arg.is_empty() || arg.len() > 8 {
            return None;
        }
        let len = arg.len();
        // The bytes in two loads, whatever the length: two overlapping 4-byte words from 4
        // bytes on (the bytes both hold are the same), three single bytes below.
        let word = if len >= 4 {
            let low = u32::from_le_bytes([arg[0], arg[1], arg[2], arg[3]]);
            let high = u32::from_le_bytes([arg[len - 4], arg[len - 3], arg[len - 2], arg[len - 1]]);
            u64::from(low) | u64::from(high) << (8 * (len - 4))
        } else {
            u64::from(arg[0])
                | u64::from(arg[len / 2]) << (8 * (len / 2))
                | u64::from(arg[len - 1]) << (8 * (len - 1))
        };
        // A NUL byte among the argument's (the bytes past its end made non-zero first).
        let padded = word | (u64::MAX << (8 * len - 1) << 1);
        if padded.wrapping_sub(ONES) & !padded & HIGHS != 0 {
            return None;
        }
        // Upper case: bytes from 'a' to 'z' (below 0x80) lose 0x20. Adding 0x1F to a byte's
        // low 7 bits sets its top bit from 'a' on, adding 0x05 from '{' on.
        let low7 = word & !HIGHS;
        let from_a = low7 + 0x1F1F_1F1F_1F1F_1F1F;
        let past_z = low7 + 0x0505_0505_0505_0505;
        let lower = from_a & !past_z & !word & HIGHS;
        Some(Keyword(word ^ (lower >> 2)))
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
/// from the `Tail`). `syntax_error` is the reply for a keyword out of place, repeated, or
/// unknown.
pub fn parse_options<'a>(
    tail: &'a [&'a [u8]],
    syntax_error: CommandError,
    mut command_keyword: impl FnMut(Keyword, &mut Tail<'a>) -> Result<bool, CommandError>,
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
            continue;
        }
        let keyword = Keyword::read(arg).ok_or(syntax_error)?;
        if let Some(unit) = keyword.unit() {
            if unit_given {
                return Err(syntax_error);
            }
            unit_given = true;
            options.unit = unit;
        } else if keyword == Keyword::REFUND {
            if options.refund {
                return Err(syntax_error);
            }
            options.refund = true;
        } else if keyword == Keyword::BLOCK {
            let duration = tail.next_argument().ok_or(syntax_error)?;
            let duration = parse_integer(duration).filter(|&duration| duration > 0);
            if block.replace(duration.ok_or(BLOCK_NOT_POSITIVE)?).is_some() {
                return Err(syntax_error);
            }
        } else if !command_keyword(keyword, &mut tail)? {
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
        let options = parse_options(
            &[b"3", b"BUCKETS", b"60", b"MS"],
            SYNTAX,
            |keyword, tail| {
                if keyword == Keyword::new("BUCKETS") {
                    seen = tail.next_argument().and_then(parse_integer);
                    return Ok(true);
                }
                Ok(false)
            },
        )
        .unwrap();
        assert_eq!(seen, Some(60));
        assert_eq!(options.quantity, 3);
        assert_eq!(options.unit, Unit::Milliseconds);
    }
}
