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

use std::sync::OnceLock;

use crate::core::effect::{Arg, Effect};
use crate::core::packed::{Decimal, Packed};
use crate::core::time::Millis;
use crate::redis::api::{self, Io, OwnedString, ServerStr};
use crate::redis::call::{Invocation, KeyName};
use crate::redis::reused::Reused;

/// The keywords effects carry, made once: every `SET` sends `PXAT`.
struct SharedWords {
    pxat: OwnedString,
    blocked: OwnedString,
}

static SHARED_WORDS: OnceLock<SharedWords> = OnceLock::new();

// SAFETY: see `OwnedString`'s `Send`: the module touches server strings only while the
// server runs it, one call at a time; the words are never changed once made.
unsafe impl Sync for SharedWords {}

/// The strings effects share, made at load ([`make_shared_strings`]) or at their first use;
/// they live as long as the module.
fn shared() -> &'static SharedWords {
    SHARED_WORDS.get_or_init(|| SharedWords {
        pxat: OwnedString::new(b"PXAT"),
        blocked: OwnedString::new(b"BLOCKED"),
    })
}

/// Makes the strings effects share, from OnLoad.
pub fn make_shared_strings() {
    shared();
}

/// The shared string of a keyword effects carry; `None` for another word (then made anew).
fn shared_word(word: &[u8]) -> Option<ServerStr<'static>> {
    match word {
        b"PXAT" => Some(shared().pxat.as_str()),
        b"BLOCKED" => Some(shared().blocked.as_str()),
        _ => None,
    }
}

/// The two expiries most recently propagated, as the string objects the server copies into
/// the replication stream and the AOF. Two, so that a call over two limiters (`RL.ALL`)
/// keeps the one that repeats.
struct LastExpiries {
    /// Each expiry, and its string: the module's own reference (propagated copies hold
    /// theirs).
    strings: [Option<(i64, OwnedString)>; 2],
    /// The one used last.
    newest: usize,
}

static LAST_EXPIRIES: Reused<LastExpiries> = Reused::new(LastExpiries {
    strings: [None, None],
    newest: 0,
});

/// Runs `send` with `expire_at` in decimal as a server string, made only when it is not one
/// of the two kept.
fn with_expiry_string<R>(expire_at: Millis, send: impl FnOnce(ServerStr<'_>) -> R) -> R {
    LAST_EXPIRIES.with(|last| {
        let kept = |i: usize| matches!(&last.strings[i], Some((at, _)) if *at == expire_at.get());
        let slot = (0..2).find(|&i| kept(i)).unwrap_or(1 - last.newest);
        last.newest = slot;
        let (_, string) = last.strings[slot]
            .take()
            .filter(|(at, _)| *at == expire_at.get())
            .unwrap_or_else(|| {
                (
                    expire_at.get(),
                    OwnedString::new(Decimal::new(expire_at.get()).as_bytes()),
                )
            });
        let sent = send(string.as_str());
        last.strings[slot] = Some((expire_at.get(), string));
        sent
    })
}

/// The string object an effect's argument travels as.
enum ArgString<'s> {
    /// One that lives on: a shared keyword, or the object the key's new value was stored as.
    Kept(ServerStr<'s>),
    /// One made for this effect, freed after it (the server holds references of its own to
    /// what it sends).
    Made(OwnedString),
    /// The expiry, one of the two kept ([`with_expiry_string`]).
    Expiry,
}

impl ArgString<'_> {
    fn of<'s>(arg: &Arg, stored: Option<&'s OwnedString>) -> ArgString<'s> {
        match (arg, stored) {
            (Arg::Value(_), Some(stored)) => ArgString::Kept(stored.as_str()),
            (Arg::Expiry(_), _) => ArgString::Expiry,
            (Arg::Word(word), _) => shared_word(word.to_bytes()).map_or_else(
                || ArgString::Made(OwnedString::new(word.to_bytes())),
                ArgString::Kept,
            ),
            (Arg::Value(bytes) | Arg::Bytes(bytes), _) => ArgString::Made(OwnedString::new(bytes)),
        }
    }

    fn get<'a>(&'a self, expiry: ServerStr<'a>) -> ServerStr<'a> {
        match self {
            ArgString::Kept(string) => *string,
            ArgString::Made(string) => string.as_str(),
            ArgString::Expiry => expiry,
        }
    }
}

/// Runs `send` with an effect's arguments after the key (at most three) as string objects;
/// `stored`, when given, is the object the key's new value was stored as (sent for
/// [`Arg::Value`]): neither it nor the expiry is made again.
fn with_args<R>(
    args: &[Arg],
    stored: Option<&OwnedString>,
    send: impl FnOnce(&[ServerStr<'_>]) -> R,
) -> R {
    let strings: [Option<ArgString<'_>>; 3] =
        std::array::from_fn(|at| args.get(at).map(|arg| ArgString::of(arg, stored)));
    let send_with = |expiry: ServerStr<'_>| {
        let get = |at: usize| {
            strings[at]
                .as_ref()
                .map_or(expiry, |string| string.get(expiry))
        };
        match args.len() {
            0 => send(&[]),
            1 => send(&[get(0)]),
            2 => send(&[get(0), get(1)]),
            _ => send(&[get(0), get(1), get(2)]),
        }
    };
    let expiry = args.iter().find_map(|arg| match arg {
        Arg::Expiry(expire_at) => Some(*expire_at),
        _ => None,
    });
    match expiry {
        Some(expire_at) => with_expiry_string(expire_at, send_with),
        // No argument is the expiry: any string stands in for it, unread.
        None => send_with(shared().pxat.as_str()),
    }
}

/// Sends `effect` on `key` to replicas and the AOF, for the running `call`; `stored` is the
/// string object the key's new value was just stored as, if it was.
pub fn propagate(call: &Invocation, key: KeyName, effect: &Effect, stored: Option<&OwnedString>) {
    let mut scratch = Packed::default();
    let encoded = effect.encode(&mut scratch);
    with_args(encoded.args(), stored, |args| {
        api::replicate(call.ctx(), encoded.command, key, args)
    });
}

/// Writes `effect` on `key` to an AOF being rewritten (`aof_rewrite`'s `io`).
pub fn emit_aof(aof: Io<'_>, key: ServerStr<'_>, effect: &Effect) {
    let mut scratch = Packed::default();
    let encoded = effect.encode(&mut scratch);
    with_args(encoded.args(), None, |args| {
        api::emit_aof(aof, encoded.command, key, args)
    });
}
