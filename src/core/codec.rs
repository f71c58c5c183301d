//! The byte layout of the values the module keeps in ordinary Redis string keys.
//!
//! Every value starts with a tag byte from `0xF5..=0xFF`. Those bytes never occur in UTF-8
//! text, so a value written by anything else (text, JSON, a number) is never mistaken for
//! a limiter's state, and the tag tells which command (and which layout version) wrote it:
//! one command never reinterprets another's key.
//!
//! The one exception is the state redis-cell writes for the same command (decimal
//! nanoseconds), which `CL.THROTTLE` reads so that it can replace redis-cell on live data.
//!
//! Values are kept short: the master writes every state as a raw string (an object and its
//! bytes), which up to 14 bytes takes two 16-byte allocations, the least any string value
//! costs besides a small integer. A replica, or an RDB load, stores what `SET` stores, an
//! embedded string: 32 bytes up to 12 bytes of value, 48 up to 28 (Redis 7).

use super::gcra::{Basis, GcraState, ShareBasis};
use super::time::{Micros, Ticks};

/// Tag of a `CL.THROTTLE` (GCRA) value.
pub const GCRA_TAG: u8 = 0xF8;

/// Length of a `CL.THROTTLE` value as the first releases wrote it, still read: the tag, then
/// the TAT as an unsigned 88-bit little-endian count of ticks (2^-24 ns) since the Unix
/// epoch.
pub const GCRA_V1_LEN: usize = 12;

/// Length of a `CL.THROTTLE` value: the tag, the TAT as in [`GCRA_V1_LEN`]'s layout, then
/// the [`Basis`] it was written under (its emission interval's code, 2 bytes). 14 bytes: a
/// raw string of up to 14 bytes, as the master writes it, takes the smallest allocation.
pub const GCRA_LEN: usize = 1 + TICKS_LEN + BASIS_LEN;

/// Length of a `CL.THROTTLE` value as 5fec6b4 wrote it, still read: the tag, the
/// [`ShareBasis`] (the tolerance in whole nanoseconds, 8 bytes, then the instant written,
/// microseconds since the epoch in 7 bytes), then the TAT.
pub const GCRA_SHARE_LEN: usize = 1 + SHARE_BASIS_LEN + TICKS_LEN;

/// Tag of a `CL.THROTTLE ... WARMUP` value.
pub const WARM_GCRA_TAG: u8 = 0xFD;

/// Length of a `CL.THROTTLE ... WARMUP` value as the first releases wrote it, still read:
/// the tag, the TAT, then how cold the limiter was at its TAT (a span of up to the warm-up
/// period, in ticks, 11 bytes).
pub const WARM_GCRA_V1_LEN: usize = 1 + 2 * TICKS_LEN;

/// Length of a `CL.THROTTLE ... WARMUP` value: the tag, the TAT, the coldness, the
/// [`Basis`].
pub const WARM_GCRA_LEN: usize = 1 + 2 * TICKS_LEN + BASIS_LEN;

/// Length of a `CL.THROTTLE ... WARMUP` value as 5fec6b4 wrote it, still read: the tag, the
/// [`ShareBasis`], the TAT, the coldness.
pub const WARM_GCRA_SHARE_LEN: usize = 1 + SHARE_BASIS_LEN + 2 * TICKS_LEN;

/// Bytes of an instant or span in ticks (88 bits, little-endian).
const TICKS_LEN: usize = 11;

/// Bytes of a [`Basis`].
const BASIS_LEN: usize = 2;

/// Bytes of a [`ShareBasis`]: the tolerance's nanoseconds (8), the instant's microseconds (7).
const SHARE_BASIS_LEN: usize = 8 + 7;

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

// The window counters' tags (their layouts are `core/windows/`'s).

/// Tag of a `FIXED` state.
pub const FIXED_TAG: u8 = 0xF9;
/// Tag of a `SLIDING` state.
pub const SLIDING_TAG: u8 = 0xFA;
/// Tag of a `BUCKETS` state as the first release wrote it (all `n` counts), still read.
pub const BUCKETS_V1_TAG: u8 = 0xFB;

/// Tag of a `BUCKETS` log: the entries, then the trailer (`core/windows/buckets.rs`).
pub const BUCKETS_TAG: u8 = 0xFC;

/// Tag of a `BUCKETS` log as 5fec6b4 wrote it, still read: its trailer ends with the limit
/// its counts were counted under (passed over: counts are read as counted).
pub const BUCKETS_LIMITED_TAG: u8 = 0xF6;

/// Tag of an `ANCHORED` state (`core/windows/anchored.rs`).
pub const ANCHORED_TAG: u8 = 0xFE;

/// Tag of a load state (`RL.LOAD.*`; its layout is `core/load/layout.rs`'s).
pub const LOAD_TAG: u8 = 0xF7;

/// The tags of a window counter's state, of any algorithm.
pub const WINDOW_TAGS: [u8; 6] = [
    FIXED_TAG,
    SLIDING_TAG,
    BUCKETS_V1_TAG,
    BUCKETS_TAG,
    BUCKETS_LIMITED_TAG,
    ANCHORED_TAG,
];

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

/// Whether a string of `len` bytes may hold a `CL.THROTTLE` state, ours (of any release) or
/// redis-cell's.
pub fn is_gcra_length(len: usize) -> bool {
    matches!(
        len,
        GCRA_LEN
            | GCRA_V1_LEN
            | GCRA_SHARE_LEN
            | REDIS_CELL_LEN
            | WARM_GCRA_LEN
            | WARM_GCRA_V1_LEN
            | WARM_GCRA_SHARE_LEN
    )
}

/// Encodes a `CL.THROTTLE` state written under `basis`. `tat` must lie in
/// `0..=Ticks::LATEST`, which every TAT the core produces does.
pub fn encode_gcra(tat: Ticks, basis: Basis) -> [u8; GCRA_LEN] {
    let mut value = [0; GCRA_LEN];
    value[0] = GCRA_TAG;
    write_ticks(tat, &mut value[1..1 + TICKS_LEN]);
    value[1 + TICKS_LEN..].copy_from_slice(&basis.0.to_le_bytes());
    value
}

/// Encodes a `CL.THROTTLE ... WARMUP` state written under `basis`: the TAT, and the
/// coldness at the TAT (both in `0..=Ticks::LATEST`).
pub fn encode_warm_gcra(state: GcraState, basis: Basis) -> [u8; WARM_GCRA_LEN] {
    let mut value = [0; WARM_GCRA_LEN];
    value[0] = WARM_GCRA_TAG;
    let (tat, rest) = value[1..].split_at_mut(TICKS_LEN);
    let (cold, code) = rest.split_at_mut(TICKS_LEN);
    write_ticks(state.tat, tat);
    write_ticks(state.cold, cold);
    code.copy_from_slice(&basis.0.to_le_bytes());
    value
}

/// What a stored `CL.THROTTLE` state says it was written under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Nothing: the first releases' layout, or redis-cell's. Read under the parameters of
    /// the call that reads it.
    Unknown,
    /// An emission interval ([`crate::core::gcra::Gcra::carried`]).
    Rate(Basis),
    /// 5fec6b4's layout: a bucket's size, and when ([`crate::core::gcra::Gcra::carried_share`]).
    Share(ShareBasis),
}

/// Decodes any `CL.THROTTLE` state, of this release, of an earlier one or redis-cell's: its
/// TAT, its coldness (0 for a limiter without a warm-up) and what it was written under.
/// `None` when the bytes are not a state.
pub fn decode_gcra_state(value: &[u8]) -> Option<(GcraState, Written)> {
    let warm = |tat, cold| GcraState { tat, cold };
    let code = |bytes: &[u8]| Written::Rate(Basis(u16::from_le_bytes([bytes[0], bytes[1]])));
    match (value.first(), value.len()) {
        (Some(&GCRA_TAG), GCRA_LEN) => Some((
            warm(read_ticks(&value[1..1 + TICKS_LEN]), Ticks::ZERO),
            code(&value[1 + TICKS_LEN..]),
        )),
        (Some(&WARM_GCRA_TAG), WARM_GCRA_LEN) => {
            let (tat, rest) = value[1..].split_at(TICKS_LEN);
            let (cold, basis) = rest.split_at(TICKS_LEN);
            Some((warm(read_ticks(tat), read_ticks(cold)), code(basis)))
        }
        (Some(&GCRA_TAG), GCRA_SHARE_LEN) => Some((
            warm(read_ticks(&value[1 + SHARE_BASIS_LEN..]), Ticks::ZERO),
            Written::Share(read_share_basis(&value[1..1 + SHARE_BASIS_LEN])),
        )),
        (Some(&WARM_GCRA_TAG), WARM_GCRA_SHARE_LEN) => {
            let (tat, cold) = value[1 + SHARE_BASIS_LEN..].split_at(TICKS_LEN);
            Some((
                warm(read_ticks(tat), read_ticks(cold)),
                Written::Share(read_share_basis(&value[1..1 + SHARE_BASIS_LEN])),
            ))
        }
        (Some(&WARM_GCRA_TAG), WARM_GCRA_V1_LEN) => {
            let (tat, cold) = value[1..].split_at(TICKS_LEN);
            Some((warm(read_ticks(tat), read_ticks(cold)), Written::Unknown))
        }
        _ => decode_gcra_v1(value).map(|tat| (warm(tat, Ticks::ZERO), Written::Unknown)),
    }
}

/// Decodes a `CL.THROTTLE` state of the first releases' layout, or one redis-cell left
/// behind (19 decimal digits of nanoseconds), so that switching modules keeps every
/// limiter's state; the next admitted request rewrites it in this release's layout.
/// `None` when the bytes are neither.
fn decode_gcra_v1(value: &[u8]) -> Option<Ticks> {
    if value.len() == REDIS_CELL_LEN && value.iter().all(u8::is_ascii_digit) {
        let nanos: u64 = std::str::from_utf8(value).ok()?.parse().ok()?;
        return Some(Ticks::saturating(
            i128::from(nanos) * Ticks::NANOSECOND.get(),
        ));
    }
    match value.split_first() {
        Some((&GCRA_TAG, tat)) if tat.len() == TICKS_LEN => Some(read_ticks(tat)),
        _ => None,
    }
}

/// Writes `ticks` (in `0..=Ticks::LATEST`) as 11 little-endian bytes.
fn write_ticks(ticks: Ticks, bytes: &mut [u8]) {
    debug_assert!((0..=Ticks::LATEST.get()).contains(&ticks.get()));
    bytes.copy_from_slice(&ticks.get().to_le_bytes()[..TICKS_LEN]);
}

/// Reads 11 little-endian bytes of ticks.
fn read_ticks(bytes: &[u8]) -> Ticks {
    let mut word = [0; 16];
    word[..TICKS_LEN].copy_from_slice(bytes);
    Ticks::saturating(i128::from_le_bytes(word))
}

fn read_share_basis(bytes: &[u8]) -> ShareBasis {
    let mut written_at = [0; 8];
    written_at[..7].copy_from_slice(&bytes[8..]);
    ShareBasis {
        tolerance_nanos: u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default()),
        written_at: Micros::saturating(i64::from_le_bytes(written_at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    /// The TAT of a decoded state, whatever its layout.
    fn tat_of(value: &[u8]) -> Option<Ticks> {
        decode_gcra_state(value).map(|(state, _)| state.tat)
    }

    const BASIS: Basis = Basis(0x0A0B);

    #[test]
    fn every_tag_is_distinct_and_a_byte_utf8_text_never_holds() {
        // Every tag a stored string starts with: each a byte UTF-8 text never holds (0xF5 to
        // 0xFF), so no value a user wrote is read as a state.
        let mut tags = vec![GCRA_TAG, WARM_GCRA_TAG, LOAD_TAG, BLOCKED_TAG];
        tags.extend(WINDOW_TAGS);
        for (i, tag) in tags.iter().enumerate() {
            assert!(*tag >= 0xF5, "{tag:#x}");
            assert!(!tags[i + 1..].contains(tag), "{tag:#x} twice");
            assert!(std::str::from_utf8(&[*tag]).is_err());
        }
    }

    #[test]
    fn layout_is_the_tag_little_endian_ticks_then_the_basis() {
        let value = encode_gcra(Ticks::saturating(0x0102_0304), BASIS);
        assert_eq!(value, [0xF8, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0x0B, 0x0A]);
        assert_eq!(encode_gcra(Ticks::LATEST, BASIS)[1..12], [0xFF; 11]);
        let warm = GcraState {
            tat: Ticks::saturating(0x0102),
            cold: Ticks::saturating(0x0304),
        };
        let value = encode_warm_gcra(warm, BASIS);
        assert_eq!(value.len(), 25);
        assert_eq!(
            (value[0], &value[1..3], &value[12..14]),
            (0xFD, &[2, 1][..], &[4, 3][..])
        );
        assert_eq!(value[23..], [0x0B, 0x0A]);
        assert_eq!(
            decode_gcra_state(&value),
            Some((warm, Written::Rate(BASIS)))
        );
        assert_eq!(
            decode_gcra_state(&encode_gcra(warm.tat, BASIS)),
            Some((
                GcraState {
                    tat: warm.tat,
                    cold: Ticks::ZERO
                },
                Written::Rate(BASIS)
            ))
        );
    }

    #[test]
    fn the_first_releases_layouts_are_read_with_no_basis() {
        let tat = Ticks::saturating(0x0102_0304);
        let mut v1 = vec![0xF8, 4, 3, 2, 1];
        v1.resize(12, 0);
        assert_eq!(
            decode_gcra_state(&v1),
            Some((
                GcraState {
                    tat,
                    cold: Ticks::ZERO
                },
                Written::Unknown
            ))
        );
        let mut warm_v1 = v1.clone();
        warm_v1[0] = 0xFD;
        warm_v1.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            decode_gcra_state(&warm_v1),
            Some((
                GcraState {
                    tat,
                    cold: Ticks::saturating(9)
                },
                Written::Unknown
            ))
        );
    }

    /// 5fec6b4's layouts: the tag, the tolerance's nanoseconds (8 bytes), the instant written
    /// (7 bytes of microseconds), the TAT, and with a warm-up the coldness.
    #[test]
    fn the_share_layouts_of_5fec6b4_are_read_with_their_share_basis() {
        let share = ShareBasis {
            tolerance_nanos: 0x0A0B_0C0D,
            written_at: Micros::saturating(0x0001_0203_0405_0607),
        };
        let mut value = vec![
            0xF8, 0x0D, 0x0C, 0x0B, 0x0A, 0, 0, 0, 0, 7, 6, 5, 4, 3, 2, 1,
        ];
        value.extend_from_slice(&[4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(value.len(), GCRA_SHARE_LEN);
        let tat = Ticks::saturating(0x0102_0304);
        assert_eq!(
            decode_gcra_state(&value),
            Some((
                GcraState {
                    tat,
                    cold: Ticks::ZERO
                },
                Written::Share(share)
            ))
        );
        value[0] = 0xFD;
        value.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            decode_gcra_state(&value),
            Some((
                GcraState {
                    tat,
                    cold: Ticks::saturating(9)
                },
                Written::Share(share)
            ))
        );
    }

    #[test]
    fn other_values_are_not_mistaken_for_state() {
        let valid = encode_gcra(Micros::saturating(1_700_000_000_000_000).ticks(), BASIS);
        assert!(tat_of(&valid).is_some());
        assert_eq!(tat_of(b""), None);
        assert_eq!(tat_of(b"hello world!"), None);
        assert_eq!(tat_of(b"170000000000"), None);
        assert_eq!(tat_of(&valid[..13]), None);
        let mut longer = valid.to_vec();
        longer.push(0);
        assert_eq!(tat_of(&longer), None);
        for tag in [0xF9, 0xFD, 0xFF] {
            let mut retagged = valid;
            retagged[0] = tag;
            assert_eq!(tat_of(&retagged), None);
        }
    }

    #[test]
    fn redis_cell_states_are_read_as_nanoseconds() {
        let nanos = 1_795_282_310_692_123_456_u64;
        let tat = tat_of(nanos.to_string().as_bytes()).unwrap();
        assert_eq!(
            tat,
            Ticks::saturating(i128::from(nanos) * Ticks::NANOSECOND.get())
        );
        assert!(is_gcra_length(19) && is_gcra_length(12) && is_gcra_length(14));
        assert!(is_gcra_length(27) && is_gcra_length(25) && is_gcra_length(38));
        assert!(!is_gcra_length(18));
        assert_eq!(tat_of(b"179528231069212345x"), None);
        assert_eq!(tat_of(b"-79528231069212345"), None);
        assert_eq!(tat_of(b"+795282310692123456"), None);
        assert_eq!(tat_of(b"17952823106921234567"), None);
    }

    #[test]
    fn a_blocked_value_wraps_any_state() {
        let state = encode_gcra(Ticks::saturating(5), BASIS);
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
        assert!(is_state_length(is_gcra_length, 27) && is_state_length(is_gcra_length, 35));
        assert!(is_state_length(is_gcra_length, 20) && is_state_length(is_gcra_length, 8));
        assert!(is_state_length(is_gcra_length, 22) && is_state_length(is_gcra_length, 33));
        assert!(!is_state_length(is_gcra_length, 13) && !is_state_length(is_gcra_length, 7));
    }

    proptest! {
        #[test]
        fn round_trips(
            tat in 0..=Ticks::LATEST.get(),
            cold in 0..=Ticks::LATEST.get(),
            code in any::<u16>(),
        ) {
            let basis = Basis(code);
            let state = GcraState { tat: Ticks::saturating(tat), cold: Ticks::saturating(cold) };
            let warm = GcraState { cold: Ticks::ZERO, ..state };
            prop_assert_eq!(decode_gcra_state(&encode_gcra(state.tat, basis)), Some((warm, Written::Rate(basis))));
            prop_assert_eq!(decode_gcra_state(&encode_warm_gcra(state, basis)), Some((state, Written::Rate(basis))));
        }

        #[test]
        fn utf8_text_is_never_state(text in "(.{12}|.{14}|.{23}|.{25}|.{27}|.{38})") {
            prop_assert_eq!(tat_of(text.as_bytes()), None);
        }
    }
}
