//! Values that must not be guessed (lease ids): SipHash-2-4 ([`crate::core::siphash`]) of a
//! counter, under a key drawn once from the server's random source (`RedisModule_GetRandomBytes`:
//! SHA-256 in counter mode over a seed from `/dev/urandom`). About a hundred instructions a
//! draw, where the server's source costs a SHA-256 block.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::core::siphash::siphash24;
use crate::redis::api;

/// The key, drawn at load ([`seed`]); zero until then.
static KEY: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
/// How many values were drawn.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Draws the key from the server's random source, from OnLoad.
pub fn seed() {
    let mut bytes = [0u8; 16];
    api::random_bytes(&mut bytes);
    for (word, chunk) in KEY.iter().zip(bytes.chunks_exact(8)) {
        let value = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        word.store(value, Ordering::Relaxed);
    }
}

/// A new value no one outside the server can predict.
pub fn next() -> u64 {
    let key = [
        KEY[0].load(Ordering::Relaxed),
        KEY[1].load(Ordering::Relaxed),
    ];
    siphash24(key, COUNTER.fetch_add(1, Ordering::Relaxed))
}
