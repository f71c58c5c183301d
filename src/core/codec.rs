//! The byte layout of the values the module keeps in ordinary Redis string keys.
//!
//! Every value starts with a tag byte from `0xF8..=0xFF`. Those bytes never occur in UTF-8
//! text, so a value written by anything else (text, JSON, a number) is never mistaken for
//! a limiter's state, and the tag tells which command (and which layout version) wrote it:
//! one command never reinterprets another's key.
//!
//! The one exception is the state redis-cell writes for the same command (decimal
//! nanoseconds), which `CL.THROTTLE` reads so that it can replace redis-cell on live data.
//!
//! Values are kept to 12 bytes where possible: Redis stores a string of up to 12 bytes in
//! a single 32-byte allocation (an embedded string, as a replica or an RDB load creates
//! it; the master's raw string costs the same 16 + 16 bytes), the least any string value
//! costs besides a small integer.

use super::gcra::GcraState;
use super::time::{Micros, Ticks};

/// Tag of a `CL.THROTTLE` (GCRA) value, layout version 1.
pub const GCRA_TAG: u8 = 0xF8;

/// Length of a `CL.THROTTLE` value: the tag, then the TAT as an unsigned 88-bit
/// little-endian count of ticks (2^-24 ns) since the Unix epoch.
pub const GCRA_LEN: usize = 12;

/// Tag of a `CL.THROTTLE ... WARMUP` value: the tag, the TAT as in [`GCRA_TAG`]'s layout,
/// then how cold the limiter was at its TAT (a span of up to the warm-up period, in ticks,
/// 11 bytes).
pub const WARM_GCRA_TAG: u8 = 0xFD;

/// Length of a `CL.THROTTLE ... WARMUP` value.
pub const WARM_GCRA_LEN: usize = 23;

/// Length of a state written by redis-cell: its TAT in nanoseconds since the epoch, in
/// decimal. Every instant from 2001 to 2286 has 19 digits.
pub const REDIS_CELL_LEN: usize = 19;

/// Where the bytes of a new state go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// They replace the stored value from this offset on; 0 when they are the whole value.
    pub at: usize,
    /// Whether the key keeps the expiry it has: the state's end did not move.
    pub expiry_kept: bool,
}

impl Placement {
    /// The whole value, with its expiry set.
    pub const WHOLE: Placement = Placement {
        at: 0,
        expiry_kept: false,
    };

    /// The value a key holding `stored` holds once `bytes` are placed: what the Redis layer
    /// does with DMA, and replicas with `SETRANGE`. Panics on a placement no stored value
    /// allows (past its end, or shortening it).
    #[cfg(test)]
    pub fn place(self, stored: Option<&[u8]>, bytes: &[u8]) -> Vec<u8> {
        if self.at == 0 {
            return bytes.to_vec();
        }
        let stored = stored.expect("a patch of a missing value");
        assert!(stored.len() >= self.at, "a patch past the value's end");
        assert!(
            self.at + bytes.len() >= stored.len(),
            "a patch shortening the value"
        );
        let mut value = stored[..self.at].to_vec();
        value.extend_from_slice(bytes);
        value
    }
}

/// Tag of a value whose key is in a penalty block (`BLOCK`), whatever the algorithm: the
/// tag, the block's end in microseconds since the epoch (7 bytes, little-endian: 2^56 µs
/// reaches the year 4253), then the limiter's own state, unchanged.
pub const BLOCKED_TAG: u8 = 0xFF;

/// Bytes before the limiter's own state in a blocked value.
pub const BLOCKED_HEADER_LEN: usize = 8;

/// Splits a stored value into the end of its block (`Micros::ZERO` when it has none) and the
/// limiter's own state (`None` when a blocked value holds none).
pub fn split_blocked(value: &[u8]) -> (Micros, Option<&[u8]>) {
    match value.split_first() {
        Some((&BLOCKED_TAG, rest)) if rest.len() >= BLOCKED_HEADER_LEN - 1 => {
            let mut until = [0; 8];
            until[..BLOCKED_HEADER_LEN - 1].copy_from_slice(&rest[..BLOCKED_HEADER_LEN - 1]);
            let state = &rest[BLOCKED_HEADER_LEN - 1..];
            (
                Micros::saturating(i64::from_le_bytes(until)),
                (!state.is_empty()).then_some(state),
            )
        }
        _ => (Micros::ZERO, Some(value)),
    }
}

/// Appends the header of a value blocked until `until`; the limiter's state follows it.
pub fn push_blocked_header(until: Micros, value: &mut Vec<u8>) {
    debug_assert!((0..1 << 56).contains(&until.get()));
    value.push(BLOCKED_TAG);
    value.extend_from_slice(&until.get().to_le_bytes()[..BLOCKED_HEADER_LEN - 1]);
}

/// Whether a string of `len` bytes may hold a state whose own lengths `is_own_length`
/// accepts, blocked or not.
pub fn is_state_length(is_own_length: fn(usize) -> bool, len: usize) -> bool {
    is_own_length(len)
        || len == BLOCKED_HEADER_LEN
        || (len > BLOCKED_HEADER_LEN && is_own_length(len - BLOCKED_HEADER_LEN))
}

/// Whether a string of `len` bytes may hold a `CL.THROTTLE` state, ours or redis-cell's.
pub fn is_gcra_length(len: usize) -> bool {
    len == GCRA_LEN || len == REDIS_CELL_LEN || len == WARM_GCRA_LEN
}

/// Encodes a `CL.THROTTLE` state. `tat` must lie in `0..=Ticks::LATEST`, which every TAT
/// the core produces does.
pub fn encode_gcra(tat: Ticks) -> [u8; GCRA_LEN] {
    debug_assert!((0..=Ticks::LATEST.get()).contains(&tat.get()));
    let mut value = [0; GCRA_LEN];
    value[0] = GCRA_TAG;
    value[1..].copy_from_slice(&tat.get().to_le_bytes()[..GCRA_LEN - 1]);
    value
}

/// Encodes a `CL.THROTTLE ... WARMUP` state: the TAT, and the coldness at the TAT (both in
/// `0..=Ticks::LATEST`).
pub fn encode_warm_gcra(state: GcraState) -> [u8; WARM_GCRA_LEN] {
    debug_assert!((0..=Ticks::LATEST.get()).contains(&state.tat.get()));
    debug_assert!((0..=Ticks::LATEST.get()).contains(&state.cold.get()));
    let mut value = [0; WARM_GCRA_LEN];
    value[0] = WARM_GCRA_TAG;
    value[1..GCRA_LEN].copy_from_slice(&state.tat.get().to_le_bytes()[..GCRA_LEN - 1]);
    value[GCRA_LEN..].copy_from_slice(&state.cold.get().to_le_bytes()[..GCRA_LEN - 1]);
    value
}

/// Decodes any `CL.THROTTLE` state: with [`WARM_GCRA_TAG`], the TAT and its coldness; any
/// other ([`decode_gcra`]), the TAT, warm.
pub fn decode_gcra_state(value: &[u8]) -> Option<GcraState> {
    if value.len() != WARM_GCRA_LEN {
        return decode_gcra(value).map(|tat| GcraState {
            tat,
            cold: Ticks::ZERO,
        });
    }
    let (&tag, rest) = value.split_first()?;
    if tag != WARM_GCRA_TAG {
        return None;
    }
    let (tat, cold) = rest.split_at(GCRA_LEN - 1);
    let read = |bytes: &[u8]| {
        let mut word = [0; 16];
        word[..GCRA_LEN - 1].copy_from_slice(bytes);
        Ticks::saturating(i128::from_le_bytes(word))
    };
    Some(GcraState {
        tat: read(tat),
        cold: read(cold),
    })
}

/// Decodes a `CL.THROTTLE` state, or `None` when the bytes are not one. A state redis-cell
/// left behind (19 decimal digits of nanoseconds) is read too, so that switching modules
/// keeps every limiter's state; the next admitted request rewrites it in this layout.
pub fn decode_gcra(value: &[u8]) -> Option<Ticks> {
    if value.len() == REDIS_CELL_LEN && value.iter().all(u8::is_ascii_digit) {
        let nanos: u64 = std::str::from_utf8(value).ok()?.parse().ok()?;
        return Some(Ticks::saturating(
            i128::from(nanos) * Ticks::NANOSECOND.get(),
        ));
    }
    let (&tag, tat) = value.split_first()?;
    if tag != GCRA_TAG || tat.len() != GCRA_LEN - 1 {
        return None;
    }
    let mut bytes = [0; 16];
    bytes[..GCRA_LEN - 1].copy_from_slice(tat);
    Some(Ticks::saturating(i128::from_le_bytes(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    #[test]
    fn layout_is_the_tag_then_little_endian_ticks() {
        let value = encode_gcra(Ticks::saturating(0x0102_0304));
        assert_eq!(value, [0xF8, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(encode_gcra(Ticks::LATEST)[1..], [0xFF; 11]);
    }

    #[test]
    fn other_values_are_not_mistaken_for_state() {
        let valid = encode_gcra(Micros::saturating(1_700_000_000_000_000).ticks());
        assert!(decode_gcra(&valid).is_some());
        assert_eq!(decode_gcra(b""), None);
        assert_eq!(decode_gcra(b"hello world!"), None);
        assert_eq!(decode_gcra(b"170000000000"), None);
        assert_eq!(decode_gcra(&valid[..11]), None);
        let mut longer = valid.to_vec();
        longer.push(0);
        assert_eq!(decode_gcra(&longer), None);
        let mut retagged = valid;
        retagged[0] = 0xF9;
        assert_eq!(decode_gcra(&retagged), None);
    }

    #[test]
    fn redis_cell_states_are_read_as_nanoseconds() {
        let nanos = 1_795_282_310_692_123_456_u64;
        let tat = decode_gcra(nanos.to_string().as_bytes()).unwrap();
        assert_eq!(
            tat,
            Ticks::saturating(i128::from(nanos) * Ticks::NANOSECOND.get())
        );
        assert!(is_gcra_length(19) && is_gcra_length(12) && !is_gcra_length(18));
        assert_eq!(decode_gcra(b"179528231069212345x"), None);
        assert_eq!(decode_gcra(b"-79528231069212345"), None);
        assert_eq!(decode_gcra(b"+795282310692123456"), None);
        assert_eq!(decode_gcra(b"17952823106921234567"), None);
    }

    #[test]
    fn a_blocked_value_wraps_any_state() {
        let state = encode_gcra(Ticks::saturating(5));
        let mut value = Vec::new();
        push_blocked_header(Micros::saturating(0x0001_0203_0405_0607), &mut value);
        value.extend_from_slice(&state);
        assert_eq!(&value[..8], [0xFF, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(
            split_blocked(&value),
            (Micros::saturating(0x0001_0203_0405_0607), Some(&state[..]))
        );
        assert_eq!(
            split_blocked(&value[..8]),
            (Micros::saturating(0x0001_0203_0405_0607), None)
        );
        assert_eq!(split_blocked(&state), (Micros::ZERO, Some(&state[..])));
        assert_eq!(
            split_blocked(&[0xFF, 1]),
            (Micros::ZERO, Some(&[0xFF, 1][..]))
        );
        assert!(is_state_length(is_gcra_length, 12) && is_state_length(is_gcra_length, 20));
        assert!(is_state_length(is_gcra_length, 27) && is_state_length(is_gcra_length, 8));
        assert!(!is_state_length(is_gcra_length, 13) && !is_state_length(is_gcra_length, 7));
    }

    proptest! {
        #[test]
        fn round_trips(tat in 0..=Ticks::LATEST.get()) {
            prop_assert_eq!(decode_gcra(&encode_gcra(Ticks::saturating(tat))), Some(Ticks::saturating(tat)));
        }

        #[test]
        fn utf8_text_is_never_state(text in ".{12}") {
            prop_assert_eq!(decode_gcra(text.as_bytes()), None);
        }
    }
}
