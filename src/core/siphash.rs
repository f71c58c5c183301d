//! SipHash-2-4 (Aumasson and Bernstein, 2012) of one 64-bit word: a keyed pseudo-random
//! function, which the FFI layer runs over a counter under a key drawn from the server's
//! random source, for values that must not be guessed (lease ids). Plain Rust, no state.

/// SipHash-2-4 of the 8 little-endian bytes of `word`, under `key`.
pub fn siphash24(key: [u64; 2], word: u64) -> u64 {
    let mut v = [
        key[0] ^ 0x736f_6d65_7073_6575,
        key[1] ^ 0x646f_7261_6e64_6f6d,
        key[0] ^ 0x6c79_6765_6e65_7261,
        key[1] ^ 0x7465_6462_7974_6573,
    ];
    let round = |v: &mut [u64; 4]| {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    };
    // The message block, then the last block: the length (8) in its top byte.
    for block in [word, 8 << 56] {
        v[3] ^= block;
        round(&mut v);
        round(&mut v);
        v[0] ^= block;
    }
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference implementation's vector for the 8-byte message 00 01 .. 07 under the
    /// key 00 01 .. 0f (`vectors.h`, entry 8: 62 24 93 9a 79 f5 f5 93, little-endian).
    #[test]
    fn the_reference_vector_of_eight_bytes() {
        let key = [
            u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]),
            u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]),
        ];
        let message = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(siphash24(key, message), 0x93f5_f579_9a93_2462);
    }
}
