//! Sending a write's effect to replicas and the AOF: an [`Effect`] (what it is, defined in
//! `core::effect`) encoded and handed to the server as one command, with absolute times,
//! never the command the client sent, so that a replica, an AOF replay or a restart applies
//! the master's change whatever its own clock says. The same encoding rebuilds native values
//! in an AOF rewrite ([`emit_aof`]).
//!
//! Every argument travels as a string object. Keys whose states end together (every key of
//! a fixed window) send the same expiry, kept as one object for the next writes (the two
//! most recent), and a value just stored as a new object is sent as that object: neither is
//! formatted nor allocated again.

use std::ffi::CStr;
use std::sync::OnceLock;

use crate::core::effect::{Arg, Effect, Word};
use crate::core::packed::{Decimal, Packed};
use crate::core::time::Millis;
use crate::redis::api::{self, Io, OwnedString, ServerStr};
use crate::redis::call::{Invocation, KeyName};
use crate::redis::reused::Reused;

/// The keywords effects carry ([`Word`]), made once, in the order of their values: every
/// `SET` sends `PXAT`.
struct SharedWords([OwnedString; Word::ALL.len()]);

static SHARED_WORDS: OnceLock<SharedWords> = OnceLock::new();

// SAFETY: see `OwnedString`'s `Send`: the module touches server strings only while the
// server runs it, one call at a time; the words are never changed once made.
unsafe impl Sync for SharedWords {}

/// The string of a keyword effects carry, made at load ([`make_shared_strings`]) or at its
/// first use; it lives as long as the module.
fn shared_word(word: Word) -> ServerStr<'static> {
    let words = SHARED_WORDS
        .get_or_init(|| SharedWords(Word::ALL.map(|word| OwnedString::new(word.text()))));
    words.0[word as usize].as_str()
}

/// Makes the strings effects share, from OnLoad.
pub fn make_shared_strings() {
    shared_word(Word::Pxat);
}

/// What propagating keeps from one call to the next: the two expiries most recently sent,
/// as the string objects the server copies into the replication stream and the AOF (two, so
/// that a call over two limiters, `RL.ALL`, keeps the one that repeats), and the buffer an
/// effect's packed fields are built in.
struct Kept {
    /// Each kept expiry, in milliseconds.
    millis: [i64; 2],
    /// Its string (`None` until used): the module's own reference (propagated copies hold
    /// theirs).
    strings: [Option<OwnedString>; 2],
    /// The one used last.
    newest: usize,
    /// Where an effect's fields are packed.
    scratch: Packed,
}

static KEPT: Reused<Kept> = Reused::new(Kept {
    millis: [0; 2],
    strings: [None, None],
    newest: 0,
    scratch: Packed::new(),
});

impl Kept {
    /// `expire_at` in decimal as a server string: one of the two kept, or made in place of
    /// the older one.
    fn expiry<'k>(
        millis: &mut [i64; 2],
        strings: &'k mut [Option<OwnedString>; 2],
        newest: &mut usize,
        expire_at: Millis,
    ) -> ServerStr<'k> {
        let at = expire_at.get();
        let kept = |i: usize| millis[i] == at && strings[i].is_some();
        let slot = if kept(*newest) {
            *newest
        } else if kept(1 - *newest) {
            1 - *newest
        } else {
            let slot = 1 - *newest;
            strings[slot] = None;
            millis[slot] = at;
            slot
        };
        *newest = slot;
        strings[slot]
            .get_or_insert_with(|| OwnedString::new(Decimal::new(at).as_bytes()))
            .as_str()
    }
}

/// Runs `send` with an effect's arguments after the key (at most three) as string objects;
/// `stored`, when given, is the object the key's new value was stored as (sent for
/// [`Arg::Value`]); `expiry` is the string of its [`Arg::Expiry`], if it has one. A string
/// made here is freed after `send` (the server holds references of its own to what it sends).
fn with_args<R>(
    args: &[Arg],
    stored: Option<&OwnedString>,
    expiry: Option<ServerStr<'_>>,
    send: impl FnOnce(&[ServerStr<'_>]) -> R,
) -> R {
    let mut made: [Option<OwnedString>; 3] = [None, None, None];
    let [first, second, third] = &mut made;
    // Any string stands in past the arguments, unread.
    let pxat = shared_word(Word::Pxat);
    let mut strings = [pxat; 3];
    for ((arg, slot), string) in args.iter().zip([first, second, third]).zip(&mut strings) {
        *string = match (arg, stored) {
            (Arg::Value(_), Some(stored)) => stored.as_str(),
            (Arg::Expiry(_), _) => expiry.unwrap_or(pxat),
            (Arg::Word(word), _) => shared_word(*word),
            (Arg::Value(bytes) | Arg::Bytes(bytes), _) => {
                slot.insert(OwnedString::new(bytes)).as_str()
            }
        };
    }
    send(&strings[..args.len().min(3)])
}

/// Runs `send` with the command that carries `effect` and its arguments after the key;
/// `stored` as [`with_args`].
fn with_effect<R>(
    effect: &Effect,
    stored: Option<&OwnedString>,
    send: impl FnOnce(&CStr, &[ServerStr<'_>]) -> R,
) -> R {
    KEPT.with(|kept| {
        let Kept {
            millis,
            strings,
            newest,
            scratch,
        } = kept;
        scratch.clear();
        let encoded = effect.encode(scratch);
        let expire_at = encoded.args().iter().find_map(|arg| match arg {
            Arg::Expiry(expire_at) => Some(*expire_at),
            _ => None,
        });
        let expiry = expire_at.map(|expire_at| Kept::expiry(millis, strings, newest, expire_at));
        with_args(encoded.args(), stored, expiry, |args| {
            send(encoded.command, args)
        })
    })
}

/// Sends `effect` on `key` to replicas and the AOF, for the running `call`; `stored` is the
/// string object the key's new value was just stored as, if it was.
pub fn propagate(call: &Invocation, key: KeyName, effect: &Effect, stored: Option<&OwnedString>) {
    with_effect(effect, stored, |command, args| {
        api::replicate(call.ctx(), command, key, args)
    });
}

/// Writes `effect` on `key` to an AOF being rewritten (`aof_rewrite`'s `io`).
pub fn emit_aof(aof: Io<'_>, key: ServerStr<'_>, effect: &Effect) {
    with_effect(effect, None, |command, args| {
        api::emit_aof(aof, command, key, args)
    });
}
