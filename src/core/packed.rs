//! Several fields in one argument: decimal integers and words joined by commas, as in
//! `100,86400000000,1,1763850000000000`: how the effects of changes to native values
//! travel.
//!
//! The internal commands an effect propagates (`RL.LOG.REPLAY`, `RL.LEASE.APPLY`) carry
//! their fields this way. `RedisModule_Replicate` turns every argument into an object of its
//! own (an integer costs about 470 instructions, formatted by Redis), so one argument built
//! on the stack instead of five makes a write's effect several times cheaper to build,
//! while the replication stream and the AOF stay readable text.

/// The most bytes packed fields take: eight integers of 20 characters and their commas.
const CAPACITY: usize = 192;

/// Fields being packed, on the stack: built in place (`&mut self`), since moving it would
/// copy the whole buffer each time.
pub struct Packed {
    bytes: [u8; CAPACITY],
    len: usize,
}

impl Default for Packed {
    fn default() -> Self {
        Packed::new()
    }
}

impl Packed {
    /// No fields.
    pub const fn new() -> Packed {
        Packed {
            bytes: [0; CAPACITY],
            len: 0,
        }
    }

    /// Drops every field, for the next ones.
    pub fn clear(&mut self) -> &mut Self {
        self.len = 0;
        self
    }

    /// Appends a decimal integer.
    pub fn int(&mut self, value: i64) -> &mut Self {
        self.separate();
        self.push(Decimal::new(value).as_bytes());
        self
    }

    /// Appends a word (never containing a comma).
    pub fn word(&mut self, word: &str) -> &mut Self {
        debug_assert!(!word.contains(','));
        self.separate();
        self.push(word.as_bytes());
        self
    }

    /// The packed bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn separate(&mut self) {
        if self.len > 0 {
            self.push(b",");
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        // Callers pack a bounded number of fields; past the capacity is a bug, and the
        // fields are cut rather than written out of bounds (the receiver then refuses them).
        let end = (self.len + bytes.len()).min(CAPACITY);
        self.bytes[self.len..end].copy_from_slice(&bytes[..end - self.len]);
        self.len = end;
    }
}

/// One decimal integer, formatted on the stack: an effect's field, expiry or offset.
pub struct Decimal {
    /// Right-aligned: a sign and at most 19 digits.
    bytes: [u8; 20],
    start: usize,
}

/// "00" to "99": two digits at a time, as itoa and the C libraries do.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

impl Decimal {
    /// `value` in decimal.
    pub fn new(value: i64) -> Decimal {
        let mut bytes = [0u8; 20];
        let mut start = bytes.len();
        let mut rest = value.unsigned_abs();
        // Two digits at a time (an effect carries microsecond times of 16 digits, formatted
        // on every write of a log or a lease).
        while rest >= 100 {
            let pair = (rest % 100) as usize * 2;
            rest /= 100;
            start -= 2;
            bytes[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if rest >= 10 {
            let pair = rest as usize * 2;
            start -= 2;
            bytes[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            start -= 1;
            bytes[start] = b'0' + rest as u8;
        }
        if value < 0 {
            start -= 1;
            bytes[start] = b'-';
        }
        Decimal { bytes, start }
    }

    /// The decimal bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

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

/// The fields of a packed argument, in order.
pub fn fields(arg: &[u8]) -> impl Iterator<Item = &[u8]> {
    arg.split(|&byte| byte == b',')
}

/// The fields an internal command was given: its arguments after the key as they are, or,
/// when there is one, that argument's packed fields (at most `N`, written to `out`). `None`
/// when a packed argument has more than `N` fields.
pub fn unpack<'a, 'o, const N: usize>(
    args: &'o [&'a [u8]],
    out: &'o mut [&'a [u8]; N],
) -> Option<&'o [&'a [u8]]> {
    let [packed] = args else {
        return Some(args);
    };
    let mut len = 0;
    for field in fields(packed) {
        *out.get_mut(len)? = field;
        len += 1;
    }
    Some(&out[..len])
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    #[test]
    fn packs_integers_and_words() {
        let mut packed = Packed::default();
        packed
            .int(100)
            .int(0)
            .int(-7)
            .int(i64::MIN)
            .int(i64::MAX)
            .word("REFUND");
        assert_eq!(
            packed.as_bytes(),
            b"100,0,-7,-9223372036854775808,9223372036854775807,REFUND"
        );
        assert_eq!(Packed::default().as_bytes(), b"");
    }

    #[test]
    fn decimals_at_every_group_boundary() {
        for value in [
            0,
            9,
            10,
            99,
            100,
            9_999,
            10_000,
            99_999_999,
            100_000_000,
            100_000_001,
            1_763_850_000_123,
            9_999_999_999_999_999,
            10_000_000_000_000_000,
            i64::MAX,
        ] {
            for value in [value, -value] {
                assert_eq!(Decimal::new(value).as_bytes(), value.to_string().as_bytes());
            }
        }
        assert_eq!(
            Decimal::new(i64::MIN).as_bytes(),
            i64::MIN.to_string().as_bytes()
        );
    }

    #[test]
    fn unpacks_one_argument_and_passes_several_through() {
        let mut out = [&[][..]; 3];
        let one: &[&[u8]] = &[b"1,2"];
        assert_eq!(unpack(one, &mut out), Some(&[&b"1"[..], b"2"][..]));
        let three: &[&[u8]] = &[b"1,2,3,4"];
        assert_eq!(unpack(three, &mut out), None);
        let several: &[&[u8]] = &[b"1", b"2,3"];
        assert_eq!(unpack(several, &mut out), Some(several));
        let empty: &[&[u8]] = &[b""];
        assert_eq!(unpack(empty, &mut out), Some(&[&b""[..]][..]));
    }

    #[test]
    fn eight_of_the_longest_integers_fit() {
        let mut packed = Packed::default();
        for _ in 0..8 {
            packed.int(i64::MIN);
        }
        let fields: Vec<_> = fields(packed.as_bytes()).collect();
        assert_eq!(fields.len(), 8);
        assert!(fields.iter().all(|f| parse_integer(f) == Some(i64::MIN)));
    }

    proptest! {
        #[test]
        fn decimals_of_every_length(value in (0u32..19).prop_flat_map(|digits| {
            let high = 10i64.pow(digits);
            high / 10..high // `digits` digits (and 0 for none)
        }), negative in any::<bool>()) {
            let value = if negative { -value } else { value };
            let (formatted, expected) = (Decimal::new(value), value.to_string());
            prop_assert_eq!(formatted.as_bytes(), expected.as_bytes());
        }

        #[test]
        fn integers_round_trip(values in proptest::collection::vec(any::<i64>(), 1..8)) {
            let mut packed = Packed::default();
            for &value in &values {
                packed.int(value);
            }
            let back: Vec<_> = fields(packed.as_bytes()).map(parse_integer).collect();
            prop_assert_eq!(back, values.iter().map(|&v| Some(v)).collect::<Vec<_>>());
            let decimal: Vec<String> = values.iter().map(i64::to_string).collect();
            for (value, text) in values.iter().zip(&decimal) {
                let formatted = Decimal::new(*value);
                prop_assert_eq!(formatted.as_bytes(), text.as_bytes());
            }
            let joined = decimal.join(",");
            prop_assert_eq!(packed.as_bytes(), joined.as_bytes());
        }
    }
}
