//! What a string write sends to replicas and the AOF: its effect, with absolute times
//! (`SET key value PXAT expiry`, `SETRANGE`, `PEXPIREAT`, `DEL`), never the command, so that
//! a replica, an AOF replay or a restart applies the master's bytes and expiry whatever its
//! own clock says.
//!
//! The expiry is sent as a string object the module keeps: keys whose states end together
//! (every key of a fixed window) propagate the same one, which is then neither formatted
//! nor allocated again.

use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use crate::core::packed::Decimal;
use crate::core::time::Millis;
use crate::redis::call::{Invocation, KeyName};
use crate::redis::command_local::CommandLocal;
use crate::redis::key::OwnedString;

/// `PXAT`, made once: every `SET` propagates it.
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// Makes the strings every write propagates, from OnLoad; they live as long as the module.
pub fn make_shared_strings() {
    // SAFETY: no context: the string is the module's until freed, which it never is.
    let pxat = unsafe {
        raw::RedisModule_CreateString.unwrap()(std::ptr::null_mut(), c"PXAT".as_ptr(), 4)
    };
    PXAT.store(pxat, Ordering::Relaxed);
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
            let bytes = decimal.as_bytes();
            // SAFETY: no context: the module owns the string until it frees it here;
            // propagated copies hold references of their own.
            unsafe {
                if !last.strings[slot].is_null() {
                    raw::RedisModule_FreeString.unwrap()(std::ptr::null_mut(), last.strings[slot]);
                }
                last.strings[slot] = raw::RedisModule_CreateString.unwrap()(
                    std::ptr::null_mut(),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                );
            }
            last.millis[slot] = expire_at.0;
            slot
        });
        last.newest = slot;
        last.strings[slot]
    })
}

/// A whole value to propagate: bytes, or the string object just stored (sent as it is,
/// without a copy).
pub enum SetValue<'a> {
    /// Bytes.
    Bytes(&'a [u8]),
    /// The stored string.
    String(&'a OwnedString),
}

/// Propagates `SET key value PXAT expire_at`.
pub fn set(call: &Invocation, key: KeyName, value: SetValue, expire_at: Millis) {
    let (expiry, pxat) = (expiry_string(expire_at), PXAT.load(Ordering::Relaxed));
    // SAFETY: the running command's context and one of its keys; the server copies the
    // bytes and takes references to the strings.
    unsafe {
        let replicate = raw::RedisModule_Replicate.unwrap();
        match value {
            SetValue::Bytes(bytes) => replicate(
                call.ctx(),
                c"SET".as_ptr(),
                c"sbss".as_ptr(),
                key.0,
                bytes.as_ptr(),
                bytes.len(),
                pxat,
                expiry,
            ),
            SetValue::String(string) => replicate(
                call.ctx(),
                c"SET".as_ptr(),
                c"ssss".as_ptr(),
                key.0,
                string.as_ptr(),
                pxat,
                expiry,
            ),
        };
    }
}

/// Propagates `SETRANGE key offset bytes`.
pub fn set_range(call: &Invocation, key: KeyName, offset: usize, bytes: &[u8]) {
    let offset = Decimal::new(offset as i64);
    let offset = offset.as_bytes();
    // SAFETY: the running command's context and one of its keys; the server copies the
    // bytes.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            call.ctx(),
            c"SETRANGE".as_ptr(),
            c"sbb".as_ptr(),
            key.0,
            offset.as_ptr(),
            offset.len(),
            bytes.as_ptr(),
            bytes.len(),
        );
    }
}

/// Propagates `PEXPIREAT key expire_at`.
pub fn expire_at(call: &Invocation, key: KeyName, expire_at: Millis) {
    let expiry = expiry_string(expire_at);
    // SAFETY: the running command's context and one of its keys.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            call.ctx(),
            c"PEXPIREAT".as_ptr(),
            c"ss".as_ptr(),
            key.0,
            expiry,
        );
    }
}

/// Propagates `DEL key`.
pub fn delete(call: &Invocation, key: KeyName) {
    // SAFETY: the running command's context and one of its keys.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(call.ctx(), c"DEL".as_ptr(), c"s".as_ptr(), key.0);
    }
}
