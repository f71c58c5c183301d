//! The words every command's arguments are made of: strict integers, keywords (read in any
//! letter case, packed in one word), the unit keywords, and the cursor a command's own
//! keyword reads its value from. The grammar the limiting commands share, and the options
//! it declares, are `commands::grammar`'s.

use crate::core::time::Unit;
use crate::error::CommandError;

pub use crate::core::packed::parse_integer;

/// Parses a required integer argument; `not_an_integer` is the error otherwise.
pub fn integer_argument(
    arg: &[u8],
    not_an_integer: &'static std::ffi::CStr,
) -> Result<i64, CommandError> {
    parse_integer(arg).ok_or(CommandError::Message(not_an_integer))
}

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

    /// The keyword `token` spells (as [`Keyword::new`]).
    pub const fn from_token(token: &std::ffi::CStr) -> Keyword {
        match std::str::from_utf8(token.to_bytes()) {
            Ok(text) => Keyword::new(text),
            Err(_) => panic!("a keyword is ASCII"),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
