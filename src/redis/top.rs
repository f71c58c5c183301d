//! The server's summary of refused keys ([`crate::core::top`], read by `RL.TOP`): one per
//! server, kept in the module's memory, neither replicated nor persisted. Its size is the
//! module argument `top-keys <n>` and the config `ratelimit.top-keys` (`CONFIG SET`, where
//! the server has module configs: Redis 7.0+ and Valkey); a new size starts it afresh, and 0
//! turns it off.

use std::ffi::{c_char, c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use redis_module::raw;

use crate::redis::api::{self, Ctx};

use crate::core::time::Micros;
use crate::core::top::{Estimate, TopKeys, DEFAULT_CAPACITY, MAX_CAPACITY};

/// The summary, made at its first use. Only the server's main thread runs commands and
/// config callbacks, so the lock is never contended; it keeps the global sound regardless.
static TOP: Mutex<Option<TopKeys>> = Mutex::new(None);
/// Keys kept per minute: the module argument, then the config; 0 (the default) turns `RL.TOP`
/// off.
static CAPACITY: Mutex<usize> = Mutex::new(DEFAULT_CAPACITY);
/// Whether refusals are counted (a size above 0): read without the lock on every refusal.
static COUNTING: AtomicBool = AtomicBool::new(DEFAULT_CAPACITY != 0);

/// The config's name, after the module's prefix (`ratelimit.top-keys`).
const CONFIG_NAME: &std::ffi::CStr = c"top-keys";

fn with_top<R>(f: impl FnOnce(&mut TopKeys) -> R) -> R {
    // A panic elsewhere cannot have left the summary half-updated in a way that matters to
    // an observational count: recover it.
    let mut top = TOP.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f(top.get_or_insert_with(|| TopKeys::new(capacity())))
}

/// Keys kept per minute.
pub fn capacity() -> usize {
    *CAPACITY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Sets the keys kept per minute (0: none, `RL.TOP` is off and refusals cost nothing more),
/// starting the summary afresh if it changes.
pub fn set_capacity(capacity: usize) {
    let capacity = capacity.min(MAX_CAPACITY);
    *CAPACITY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = capacity;
    COUNTING.store(capacity > 0, Ordering::Relaxed);
    let mut top = TOP.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if top.as_ref().is_some_and(|top| top.capacity() != capacity) {
        *top = None;
    }
}

/// Counts a refused call's key at `now`.
pub fn record_refusal(key: &[u8], now: Micros) {
    if COUNTING.load(Ordering::Relaxed) {
        with_top(|top| top.record(key, now));
    }
}

/// The `count` keys refused most over the current and the previous minute.
pub fn top(count: usize, now: Micros) -> Vec<Estimate> {
    if !COUNTING.load(Ordering::Relaxed) {
        return Vec::new();
    }
    with_top(|top| top.top(count, now))
}

/// Forgets every refusal counted.
pub fn reset() {
    with_top(TopKeys::reset);
}

/// Registers `ratelimit.top-keys` (on a server with module configs) and loads its value from
/// the server's configuration; `initial` is its default (the module argument, if given).
pub fn register_config(ctx: Ctx<'_>, initial: usize) -> Result<(), String> {
    set_capacity(initial);
    let range = (0, MAX_CAPACITY as i64);
    let callbacks = (get_config as api::ConfigGet, set_config as api::ConfigSet);
    match api::register_numeric_config(ctx, CONFIG_NAME, initial as i64, range, callbacks) {
        None | Some(Ok(())) => Ok(()),
        Some(Err(why)) => Err(format!(
            "the config ratelimit.top-keys was {why} by the server"
        )),
    }
}

/// `CONFIG GET ratelimit.top-keys`.
unsafe extern "C" fn get_config(_name: *const c_char, _privdata: *mut c_void) -> c_longlong {
    capacity() as c_longlong
}

/// `CONFIG SET ratelimit.top-keys <n>`: the server has checked it is within 0 and the most.
unsafe extern "C" fn set_config(
    _name: *const c_char,
    value: c_longlong,
    _privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    set_capacity(usize::try_from(value).unwrap_or(0));
    raw::Status::Ok as c_int
}
