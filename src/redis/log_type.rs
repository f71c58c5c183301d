//! `RL.LOG`'s value as a native Redis data type, named `ratelimit` (what `TYPE` shows):
//! RDB save and load, AOF rewrite, `MEMORY USAGE`, `DEBUG DIGEST-VALUE`, `COPY`, and free
//! effort. `DUMP`/`RESTORE` (and so `MIGRATE` and Cluster resharding) go through the RDB
//! callbacks.
//!
//! RDB encoding version 1: the number of entries, then the entries as one string of 8-byte
//! little-endian words (time in microseconds << 10 | count - 1), oldest first.

use std::ffi::{c_int, c_void};
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use crate::core::log::{SlidingLog, ENTRY_LEN};

/// The RDB encoding version this build writes and reads.
const ENCODING_VERSION: c_int = 1;

/// Entries per command when the AOF is rewritten: about 8 KB each.
const ENTRIES_PER_AOF_COMMAND: usize = 1_024;

/// The command an AOF rewrite emits to rebuild a log, chunk by chunk.
pub const LOAD_CHUNK_COMMAND: &std::ffi::CStr = c"RL.LOG.LOADCHUNK";

/// The data type's name, what `TYPE` shows: exactly 9 characters, as Redis requires.
const TYPE_NAME: &std::ffi::CStr = c"ratelimit";

/// The data type, once created.
static LOG_TYPE: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(ptr::null_mut());

/// Creates the data type, from OnLoad.
pub fn create(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    let mut methods = raw::RedisModuleTypeMethods {
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
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: None,
    };
    // SAFETY: called from OnLoad; Redis copies the methods.
    let created = unsafe {
        raw::RedisModule_CreateDataType.unwrap()(
            ctx,
            TYPE_NAME.as_ptr(),
            ENCODING_VERSION,
            &mut methods,
        )
    };
    if created.is_null() {
        return Err("the server refused to create the data type 'ratelimit' (is another module using the name?)".to_owned());
    }
    LOG_TYPE.store(created, Ordering::Relaxed);
    Ok(())
}

/// The registered type, for key checks.
pub fn log_type() -> *mut raw::RedisModuleType {
    LOG_TYPE.load(Ordering::Relaxed)
}

/// Runs a callback with panics caught: Redis must never see one. `fallback` is what the
/// callback returns instead.
fn guarded<T>(fallback: T, callback: impl FnOnce() -> T) -> T {
    panic::catch_unwind(AssertUnwindSafe(callback)).unwrap_or(fallback)
}

/// # Safety
/// `value` must be a log this type created.
unsafe fn log<'a>(value: *mut c_void) -> &'a SlidingLog {
    unsafe { &*value.cast::<SlidingLog>() }
}

fn serialized(log: &SlidingLog, first: usize, count: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(count.min(log.len()) * ENTRY_LEN);
    log.serialize(first, count, &mut bytes);
    bytes
}

unsafe extern "C" fn rdb_load(io: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guarded(ptr::null_mut(), || unsafe {
        if encver != ENCODING_VERSION {
            return ptr::null_mut();
        }
        let entries = raw::RedisModule_LoadUnsigned.unwrap()(io);
        let mut len = 0;
        let buffer = raw::RedisModule_LoadStringBuffer.unwrap()(io, &mut len);
        if raw::RedisModule_IsIOError.unwrap()(io) != 0 || buffer.is_null() {
            return ptr::null_mut();
        }
        let bytes = std::slice::from_raw_parts(buffer.cast::<u8>(), len);
        let mut log = SlidingLog::default();
        let valid = entries.checked_mul(ENTRY_LEN as u64) == Some(len as u64)
            && log.append_serialized(bytes).is_some();
        raw::RedisModule_Free.unwrap()(buffer.cast());
        if valid {
            Box::into_raw(Box::new(log)).cast()
        } else {
            ptr::null_mut()
        }
    })
}

unsafe extern "C" fn rdb_save(io: *mut raw::RedisModuleIO, value: *mut c_void) {
    guarded((), || unsafe {
        let log = log(value);
        let bytes = serialized(log, 0, log.len());
        raw::RedisModule_SaveUnsigned.unwrap()(io, log.len() as u64);
        raw::RedisModule_SaveStringBuffer.unwrap()(io, bytes.as_ptr().cast(), bytes.len());
    })
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guarded((), || unsafe {
        let log = log(value);
        for first in (0..log.len()).step_by(ENTRIES_PER_AOF_COMMAND) {
            let bytes = serialized(log, first, ENTRIES_PER_AOF_COMMAND);
            raw::RedisModule_EmitAOF.unwrap()(
                aof,
                LOAD_CHUNK_COMMAND.as_ptr(),
                c"sb".as_ptr(),
                key,
                bytes.as_ptr(),
                bytes.len(),
            );
        }
    })
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    guarded(0, || unsafe {
        std::mem::size_of::<SlidingLog>() + log(value.cast_mut()).heap_size()
    })
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guarded((), || unsafe {
        let log = log(value);
        let bytes = serialized(log, 0, log.len());
        raw::RedisModule_DigestAddStringBuffer.unwrap()(md, bytes.as_ptr().cast(), bytes.len());
        raw::RedisModule_DigestEndSequence.unwrap()(md);
    })
}

unsafe extern "C" fn free(value: *mut c_void) {
    // SAFETY: Redis frees each value once, and it came from Box::into_raw.
    guarded((), || {
        drop(unsafe { Box::from_raw(value.cast::<SlidingLog>()) })
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
    guarded(ptr::null_mut(), || unsafe {
        Box::into_raw(Box::new(log(value.cast_mut()).clone())).cast()
    })
}
