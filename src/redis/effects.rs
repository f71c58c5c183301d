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
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use crate::core::effect::{Arg, Effect};
use crate::core::packed::{Decimal, Packed};
use crate::core::time::Millis;
use crate::redis::call::{Invocation, KeyName};
use crate::redis::command_local::CommandLocal;
use crate::redis::string::OwnedString;

/// The keywords effects carry, made once: every `SET` sends `PXAT`.
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());
static BLOCKED: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// Makes the strings effects share, from OnLoad; they live as long as the module.
pub fn make_shared_strings() {
    for (word, shared) in [(c"PXAT", &PXAT), (c"BLOCKED", &BLOCKED)] {
        let bytes = word.to_bytes();
        // SAFETY: no context: the string is the module's until freed, which it never is.
        let string = unsafe {
            raw::RedisModule_CreateString.unwrap()(
                std::ptr::null_mut(),
                bytes.as_ptr().cast(),
                bytes.len(),
            )
        };
        shared.store(string, Ordering::Relaxed);
    }
}

/// The shared string of a keyword effects carry; null for another word (then made anew).
fn shared_word(word: &CStr) -> *mut raw::RedisModuleString {
    match word.to_bytes() {
        b"PXAT" => PXAT.load(Ordering::Relaxed),
        b"BLOCKED" => BLOCKED.load(Ordering::Relaxed),
        _ => std::ptr::null_mut(),
    }
}

/// The two expiries most recently propagated, as the string objects the server copies into
/// the replication stream and the AOF. Two, so that a call over two limiters (`RL.ALL`)
/// keeps the one that repeats.
struct LastExpiries {
    millis: [i64; 2],
    /// Null until used; the module's own references (propagated copies hold theirs).
    strings: [*mut raw::RedisModuleString; 2],
    /// The one used last.
    newest: usize,
}

static LAST_EXPIRIES: CommandLocal<LastExpiries> = CommandLocal::new(LastExpiries {
    millis: [0; 2],
    strings: [std::ptr::null_mut(); 2],
    newest: 0,
});

/// `expire_at` in decimal as a server string, valid until the second next call.
fn expiry_string(expire_at: Millis) -> *mut raw::RedisModuleString {
    LAST_EXPIRIES.with(|last| {
        let found = (0..2).find(|&i| last.millis[i] == expire_at.0 && !last.strings[i].is_null());
        let slot = found.unwrap_or_else(|| {
            let slot = 1 - last.newest;
            let decimal = Decimal::new(expire_at.0);
            if !last.strings[slot].is_null() {
                // SAFETY: the module's own reference, freed once; propagated copies hold
                // references of their own.
                unsafe {
                    raw::RedisModule_FreeString.unwrap()(std::ptr::null_mut(), last.strings[slot])
                };
            }
            last.strings[slot] = new_string(decimal.as_bytes());
            last.millis[slot] = expire_at.0;
            slot
        });
        last.newest = slot;
        last.strings[slot]
    })
}

/// A new string object holding `bytes`, the module's until freed.
fn new_string(bytes: &[u8]) -> *mut raw::RedisModuleString {
    // SAFETY: no context; the server copies the bytes.
    unsafe {
        raw::RedisModule_CreateString.unwrap()(
            std::ptr::null_mut(),
            bytes.as_ptr().cast(),
            bytes.len(),
        )
    }
}

/// An effect's arguments after the key, as string objects. Objects made for the call are
/// freed when it is dropped (the server holds references of its own to what it sends).
struct Argv {
    strings: [*mut raw::RedisModuleString; 3],
    made: [bool; 3],
    len: usize,
}

impl Argv {
    /// `args`; `stored`, when given, is the object the key's new value was stored as (sent
    /// for [`Arg::Value`]).
    fn new(args: &[Arg], stored: Option<&OwnedString>) -> Argv {
        let mut argv = Argv {
            strings: [std::ptr::null_mut(); 3],
            made: [false; 3],
            len: args.len(),
        };
        for (at, arg) in args.iter().enumerate() {
            argv.strings[at] = match (arg, stored) {
                (Arg::Value(_), Some(stored)) => stored.as_ptr(),
                (Arg::Expiry(expire_at), _) => expiry_string(*expire_at),
                (Arg::Word(word), _) if !shared_word(word).is_null() => shared_word(word),
                (Arg::Word(word), _) => {
                    argv.made[at] = true;
                    new_string(word.to_bytes())
                }
                (Arg::Value(bytes) | Arg::Bytes(bytes), _) => {
                    argv.made[at] = true;
                    new_string(bytes)
                }
            };
        }
        argv
    }
}

impl Drop for Argv {
    fn drop(&mut self) {
        for (string, made) in self.strings.iter().zip(self.made) {
            if made {
                // SAFETY: made by `Argv::new` and freed once; the server holds its own
                // references to what it propagated.
                unsafe { raw::RedisModule_FreeString.unwrap()(std::ptr::null_mut(), *string) };
            }
        }
    }
}

/// Sends `effect` on `key` to replicas and the AOF, for the running `call`; `stored` is the
/// string object the key's new value was just stored as, if it was.
pub fn propagate(call: &Invocation, key: KeyName, effect: &Effect, stored: Option<&OwnedString>) {
    let mut scratch = Packed::default();
    let encoded = effect.encode(&mut scratch);
    let argv = Argv::new(encoded.args(), stored);
    let (ctx, command, [a, b, c]) = (call.ctx(), encoded.command.as_ptr(), argv.strings);
    // SAFETY: the running command's context and one of its keys; `argv` holds `len` live
    // string objects, to which the server takes references of its own. One format of
    // string objects per count (a vector, `v`, costs the server a reallocation per call).
    unsafe {
        let replicate = raw::RedisModule_Replicate.unwrap();
        match argv.len {
            0 => replicate(ctx, command, c"s".as_ptr(), key.0),
            1 => replicate(ctx, command, c"ss".as_ptr(), key.0, a),
            2 => replicate(ctx, command, c"sss".as_ptr(), key.0, a, b),
            _ => replicate(ctx, command, c"ssss".as_ptr(), key.0, a, b, c),
        };
    }
}

/// Writes `effect` on `key` to an AOF being rewritten (`aof_rewrite`'s `io`).
///
/// # Safety
/// `aof` and `key` must be the server's arguments to the type's `aof_rewrite` callback.
pub unsafe fn emit_aof(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    effect: &Effect,
) {
    let mut scratch = Packed::default();
    let encoded = effect.encode(&mut scratch);
    let argv = Argv::new(encoded.args(), None);
    let (command, [a, b, c]) = (encoded.command.as_ptr(), argv.strings);
    // SAFETY: per the caller; `argv` holds `len` live string objects, which the server
    // copies into the AOF (the key, which it may keep on its stack, through `s`, which copies
    // such a key).
    unsafe {
        let emit = raw::RedisModule_EmitAOF.unwrap();
        match argv.len {
            0 => emit(aof, command, c"s".as_ptr(), key),
            1 => emit(aof, command, c"ss".as_ptr(), key, a),
            2 => emit(aof, command, c"sss".as_ptr(), key, a, b),
            _ => emit(aof, command, c"ssss".as_ptr(), key, a, b, c),
        };
    }
}
