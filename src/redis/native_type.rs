//! The module's native data type, `ratelimit` (what `TYPE` shows), for the limiters whose
//! state is more than a short string: `RL.LOG`'s logs and `RL.ACQUIRE`'s lease sets. Each
//! value is one allocation (see [`crate::core::ring`]) whose first word says what it holds,
//! so one type serves every kind and the callbacks dispatch on it: RDB save and load, AOF
//! rewrite, `MEMORY USAGE`, `DEBUG DIGEST-VALUE`, `COPY`, free effort and active
//! defragmentation. `DUMP`/`RESTORE` (and so `MIGRATE` and Cluster resharding) go through the
//! RDB callbacks.
//!
//! RDB encoding version 2: the kind, then
//! - for a log: the end of its penalty block (µs, 0 for none), the number of entries and
//!   the entries as one string of 8-byte little-endian words (time in µs << 10 | count - 1),
//!   oldest first;
//! - for a lease set: the next id, the number of leases and the leases as one string of
//!   16-byte entries, the first to end first.
//!
//! Version 1 (written before blocks and leases existed) is a log's entry count and entries,
//! and still loads.

use std::ffi::{c_int, c_void, CStr};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use crate::core::effect::Effect;
use crate::core::lease::{LeaseSet, LEASE_KIND, LEASE_LEN};
use crate::core::log::{SlidingLog, ENTRY_LEN, LOG_KIND};
use crate::core::ring::{kind_of, Native};
use crate::core::time::Micros;
use crate::redis::api::{self, Ctx, DefragCtx, Digest, Io, KeyHandle, ServerStr, TypeMethods};
use crate::redis::replicate;

/// The RDB encoding version this build writes; it reads this one and every earlier one.
const ENCODING_VERSION: c_int = 2;

/// Entries per command when the AOF is rewritten: about 8 KB each.
const ENTRIES_PER_AOF_COMMAND: usize = 1_024;

/// The data type's name, what `TYPE` shows: exactly 9 characters, as the server requires.
const TYPE_NAME: &CStr = c"ratelimit";

/// The data type, once created.
static NATIVE_TYPE: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(ptr::null_mut());

/// Takes back a native value of kind `T` handed to the server as a thin pointer to its
/// words.
///
/// # Safety
/// `raw` must point to the words of a value of kind `T`, handed over with
/// `Box::into_raw(value.into_words())` and not yet taken back.
pub unsafe fn take_back<T: Native>(raw: *mut u64) -> T {
    // SAFETY: per the caller, `raw` starts an allocation of the words its word 0 says.
    let words = T::allocation_words(unsafe { *raw });
    // SAFETY: the same allocation, whole, taken back once.
    T::from_words(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(raw, words)) })
}

/// A value the server holds, by kind.
enum Value<'a> {
    Log(View<'a, SlidingLog>),
    Leases(View<'a, LeaseSet>),
}

/// The value behind a pointer the server holds.
///
/// # Safety
/// `value` must be a live value of this type, unchanged while the result lives.
unsafe fn value<'a>(value: *const c_void) -> Option<Value<'a>> {
    let raw = value.cast_mut().cast::<u64>();
    // SAFETY: per the caller.
    unsafe {
        View::of(raw)
            .map(Value::Log)
            .or_else(|| View::of(raw).map(Value::Leases))
    }
}

/// Creates the data type, from OnLoad.
pub fn create(ctx: Ctx<'_>) -> Result<(), String> {
    let mut methods = TypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: None,
        aux_save: None,
        aux_save_triggers: 0,
        free_effort: Some(free_effort),
        unlink: None,
        copy: Some(copy),
        // Servers without RedisModule_DefragAlloc never call it.
        defrag: api::can_defrag().then_some(defrag as _),
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: None,
    };
    let Some(created) = api::create_data_type(ctx, TYPE_NAME, ENCODING_VERSION, &mut methods)
    else {
        return Err("the server refused to create the data type 'ratelimit' (is another module using the name?)".to_owned());
    };
    NATIVE_TYPE.store(created.as_ptr(), Ordering::Relaxed);
    Ok(())
}

/// The registered type, for key checks.
pub fn native_type() -> *mut raw::RedisModuleType {
    NATIVE_TYPE.load(Ordering::Relaxed)
}

/// A native value read in place: never freed by this handle, valid while `'a` lasts.
pub struct View<'a, T: Native>(ManuallyDrop<T>, PhantomData<&'a T>);

impl<T: Native> View<'_, T> {
    /// The value behind `raw`, if it is of kind `T`.
    ///
    /// # Safety
    /// `raw` must be a live value of this type, unchanged while the view lives.
    pub unsafe fn of(raw: *mut u64) -> Option<Self> {
        // SAFETY: per the caller, `raw` points to a live value's word 0.
        if kind_of(unsafe { *raw }) != T::KIND {
            return None;
        }
        // SAFETY: a live value of kind `T`; ManuallyDrop never frees it.
        Some(View(
            ManuallyDrop::new(unsafe { take_back(raw) }),
            PhantomData,
        ))
    }
}

impl<T: Native> Deref for View<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A native value taken out of an open key to be changed. When dropped (after the change,
/// or during a panic's unwinding) the key gets the value back, at its new address if the
/// change moved it, so the server never holds a freed allocation.
pub struct Borrowed<'k, 'a, T: Native> {
    key: &'k mut KeyHandle<'a>,
    raw: *mut u64,
    value: ManuallyDrop<T>,
}

impl<'k, 'a, T: Native> Borrowed<'k, 'a, T> {
    /// The value of `key` (open for writing), whose raw value is `raw` of kind `T`.
    ///
    /// # Safety
    /// `raw` must be the key's module value, of this type and kind `T`, and the key must be
    /// open for writing.
    pub unsafe fn new(key: &'k mut KeyHandle<'a>, raw: *mut u64) -> Self {
        Borrowed {
            key,
            raw,
            // SAFETY: per the caller.
            value: ManuallyDrop::new(unsafe { take_back(raw) }),
        }
    }
}

impl<T: Native> Deref for Borrowed<'_, '_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Native> DerefMut for Borrowed<'_, '_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Native> Drop for Borrowed<'_, '_, T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here.
        let words = unsafe { ManuallyDrop::take(&mut self.value) }.into_words();
        let moved = Box::into_raw(words).cast::<u64>();
        if moved != self.raw {
            // SAFETY: the key is open for writing and holds this type; the old allocation
            // was freed by the change that moved it, so the server must not free it: the
            // replaced pointer it hands back is ignored.
            unsafe { self.key.replace_module_value(native_type(), moved.cast()) };
        }
    }
}

/// Hands a native value to the server as a thin pointer to its words ([`take_back`] takes
/// it back).
pub fn hand_over<T: Native>(value: T) -> *mut u64 {
    Box::into_raw(value.into_words()).cast::<u64>()
}

/// Runs a callback with panics caught: the server must never see one. `fallback` is what the
/// callback returns instead.
fn guarded<T>(fallback: T, callback: impl FnOnce() -> T) -> T {
    panic::catch_unwind(AssertUnwindSafe(callback)).unwrap_or(fallback)
}

fn serialized(log: &SlidingLog, first: usize, count: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(count.min(log.len()) * ENTRY_LEN);
    log.serialize(first, count, &mut bytes);
    bytes
}

fn serialized_leases(set: &LeaseSet, first: usize, count: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(count.min(set.len()) * LEASE_LEN);
    set.serialize(first, count, &mut bytes);
    bytes
}

/// Reads a string buffer from the RDB and hands it to `read`; the buffer is freed after,
/// and on a read error too.
fn load_buffer(io: Io<'_>, read: impl FnOnce(&[u8]) -> Option<()>) -> Option<()> {
    read(api::load_string_buffer(io)?.bytes())
}

/// Reads an unsigned integer from the RDB; `None` on a read error.
fn load_unsigned(io: Io<'_>) -> Option<u64> {
    let value = api::load_unsigned(io);
    (!api::is_io_error(io)).then_some(value)
}

/// Reads a log's entries: an entry count, then a string of that many entries.
fn load_log_entries(io: Io<'_>, log: &mut SlidingLog) -> Option<()> {
    let entries = load_unsigned(io)?;
    load_buffer(io, |bytes| {
        (entries.checked_mul(ENTRY_LEN as u64) == Some(bytes.len() as u64)).then_some(())?;
        log.append_serialized(bytes)
    })
}

/// Reads a lease set after its kind: the next id, the lease count, then the leases.
fn load_leases(io: Io<'_>) -> Option<LeaseSet> {
    let next_id = load_unsigned(io)?;
    let leases = load_unsigned(io)?;
    let mut set = LeaseSet::default();
    load_buffer(io, |bytes| {
        (leases.checked_mul(LEASE_LEN as u64) == Some(bytes.len() as u64)).then_some(())?;
        set.append_serialized(next_id, bytes)
    })?;
    Some(set)
}

/// Reads a value of encoding version `encver`; `None` on a read error or a malformed value.
fn load(io: Io<'_>, encver: c_int) -> Option<*mut u64> {
    match encver {
        1 => {
            let mut log = SlidingLog::default();
            load_log_entries(io, &mut log).map(|()| hand_over(log))
        }
        2 => match u8::try_from(load_unsigned(io)?) {
            Ok(LOG_KIND) => {
                let blocked_until = i64::try_from(load_unsigned(io)?).ok()?;
                let mut log = SlidingLog::default();
                log.set_blocked_until(Micros::saturating(blocked_until));
                load_log_entries(io, &mut log).map(|()| hand_over(log))
            }
            Ok(LEASE_KIND) => load_leases(io).map(hand_over),
            _ => None,
        },
        _ => None,
    }
}

unsafe extern "C" fn rdb_load(io: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    // SAFETY: the server calls it with its loading context, alive during the call.
    let Some(io) = (unsafe { Io::from_raw(io) }) else {
        return ptr::null_mut();
    };
    guarded(ptr::null_mut(), || {
        load(io, encver).map_or(ptr::null_mut(), |raw| raw.cast())
    })
}

unsafe extern "C" fn rdb_save(io: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: the server calls it with its saving context and a live value of this type.
    let (Some(io), Some(value)) = (unsafe { Io::from_raw(io) }, unsafe { self::value(value) })
    else {
        return;
    };
    guarded((), || match value {
        Value::Log(log) => {
            api::save_unsigned(io, u64::from(LOG_KIND));
            api::save_unsigned(io, log.blocked_until().get() as u64);
            api::save_unsigned(io, log.len() as u64);
            api::save_string_buffer(io, &serialized(&log, 0, log.len()));
        }
        Value::Leases(set) => {
            api::save_unsigned(io, u64::from(LEASE_KIND));
            api::save_unsigned(io, set.next_id());
            api::save_unsigned(io, set.len() as u64);
            api::save_string_buffer(io, &serialized_leases(&set, 0, set.len()));
        }
    })
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: the server calls it with its rewriting context, a key and its live value.
    let (Some(aof), Some(key), Some(value)) = (
        unsafe { Io::from_raw(aof) },
        unsafe { ServerStr::from_raw(key) },
        unsafe { self::value(value) },
    ) else {
        return;
    };
    guarded((), || {
        match value {
            Value::Log(log) => {
                // At least one command, so that a log holding only a block is rebuilt too.
                let chunks = log.len().div_ceil(ENTRIES_PER_AOF_COMMAND).max(1);
                for chunk in 0..chunks {
                    let first = chunk * ENTRIES_PER_AOF_COMMAND;
                    let entries = serialized(&log, first, ENTRIES_PER_AOF_COMMAND);
                    let last = chunk + 1 == chunks;
                    let blocked_until =
                        Some(log.blocked_until()).filter(|until| last && until.get() > 0);
                    let chunk = Effect::LogChunk {
                        entries: &entries,
                        blocked_until,
                    };
                    replicate::emit_aof(aof, key, &chunk);
                }
            }
            Value::Leases(set) => {
                for first in (0..set.len().max(1)).step_by(ENTRIES_PER_AOF_COMMAND) {
                    let leases = serialized_leases(&set, first, ENTRIES_PER_AOF_COMMAND);
                    let chunk = Effect::LeaseChunk {
                        next_id: set.next_id(),
                        leases: &leases,
                    };
                    replicate::emit_aof(aof, key, &chunk);
                }
            }
        }
    })
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: the server calls it with a live value of this type.
    guarded(0, || unsafe {
        match self::value(value) {
            Some(Value::Log(log)) => log.allocated_bytes(),
            Some(Value::Leases(set)) => set.allocated_bytes(),
            None => 0,
        }
    })
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: the server calls it with its digest context and a live value of this type.
    let (Some(md), Some(value)) = (unsafe { Digest::from_raw(md) }, unsafe {
        self::value(value)
    }) else {
        return;
    };
    guarded((), || {
        let bytes = match value {
            Value::Log(log) => {
                let mut bytes = serialized(&log, 0, log.len());
                bytes.extend_from_slice(&log.blocked_until().get().to_le_bytes());
                bytes
            }
            Value::Leases(set) => {
                let mut bytes = serialized_leases(&set, 0, set.len());
                bytes.extend_from_slice(&set.next_id().to_le_bytes());
                bytes
            }
        };
        api::digest_add_string_buffer(md, &bytes);
        api::digest_end_sequence(md);
    })
}

unsafe extern "C" fn free(value: *mut c_void) {
    // SAFETY: the server calls it once, with a value of this type it no longer holds.
    guarded((), || unsafe {
        let raw = value.cast::<u64>();
        match kind_of(*raw) {
            LOG_KIND => drop(take_back::<SlidingLog>(raw)),
            LEASE_KIND => drop(take_back::<LeaseSet>(raw)),
            _ => {}
        }
    })
}

unsafe extern "C" fn free_effort(
    _key: *mut raw::RedisModuleString,
    _value: *const c_void,
) -> usize {
    // One allocation, whatever the length: freeing is never worth a background thread.
    1
}

unsafe extern "C" fn copy(
    _from_key: *mut raw::RedisModuleString,
    _to_key: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    // SAFETY: the server calls it with a live value of this type.
    guarded(ptr::null_mut(), || unsafe {
        match self::value(value) {
            Some(Value::Log(log)) => hand_over(SlidingLog::clone(&log)).cast(),
            Some(Value::Leases(set)) => hand_over(LeaseSet::clone(&set)).cast(),
            None => ptr::null_mut(),
        }
    })
}

/// Active defragmentation: the value is one allocation, moved whole when the allocator
/// suggests it.
unsafe extern "C" fn defrag(
    ctx: *mut raw::RedisModuleDefragCtx,
    _key: *mut raw::RedisModuleString,
    value: *mut *mut c_void,
) -> c_int {
    // SAFETY: the server calls it with its defrag context and a pointer to a live value
    // of this type, which it lets the module replace.
    let Some(ctx) = (unsafe { DefragCtx::from_raw(ctx) }) else {
        return 0;
    };
    guarded(0, || {
        // SAFETY: the value is one allocation of the server's allocator, replaced here by
        // the one it moved to.
        unsafe {
            if let Some(moved) = api::defrag_alloc(ctx, *value) {
                *value = moved;
            }
        }
        0
    })
}
