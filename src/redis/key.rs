//! A limiter's key, through Redis' low-level key API: one lookup, the value read and
//! rewritten in place, an absolute expiry, and the change propagated to replicas and the
//! AOF as its effect, `SET key value PXAT expiry`, never as the command.
//!
//! Propagating the effect with absolute times is what makes replication deterministic: a
//! replica, an AOF replay or a restart applies the master's bytes and the master's expiry,
//! whatever its own clock says. The value is an ordinary string, so replicas need nothing
//! from the module to hold it.

use std::ffi::{c_int, CStr};

use redis_module::raw;

use std::sync::atomic::{AtomicPtr, Ordering};

use crate::core::codec::Placement;
use crate::core::ring::raw_kind;
use crate::error::CommandError;
use crate::packed::Decimal;
use crate::redis::command_local::CommandLocal;
use crate::redis::handler::Invocation;
use crate::redis::native_type::{native_type, Borrowed, Native, View};
use crate::redis::{propagation, settings};

/// How a command uses the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only reads it: peeks, and requests that can never be admitted.
    Read,
    /// May write it.
    Write,
}

/// The longest state propagated whole even when only its end changed (see
/// [`LimiterKey::write`]).
pub const PATCH_ABOVE: usize = 64;

/// `PXAT`, made once: every write propagates it.
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// Makes the strings every write propagates, from OnLoad; they live as long as the module.
pub fn make_shared_strings() {
    // SAFETY: no context: the string is the module's until freed, which it never is.
    let pxat = unsafe {
        raw::RedisModule_CreateString.unwrap()(std::ptr::null_mut(), c"PXAT".as_ptr(), 4)
    };
    PXAT.store(pxat, Ordering::Relaxed);
}

fn shared_pxat() -> *mut raw::RedisModuleString {
    PXAT.load(Ordering::Relaxed)
}

/// The two expiries most recently propagated, as the string objects Redis copies into the
/// replication stream and the AOF: keys whose states end together (every key of a fixed
/// window, and of a `SLIDING` or `BUCKETS` bucket) propagate the same one, which is then
/// neither formatted nor allocated again. Two, so that a call over two limiters (`RL.ALL`)
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

/// `expire_at_ms` in decimal as a Redis string, valid until the second next call.
fn expiry_string(expire_at_ms: i64) -> *mut raw::RedisModuleString {
    LAST_EXPIRIES.with(|last| {
        let slot = match last.millis {
            [millis, _] if millis == expire_at_ms && !last.strings[0].is_null() => 0,
            [_, millis] if millis == expire_at_ms && !last.strings[1].is_null() => 1,
            _ => {
                let slot = 1 - last.newest;
                let decimal = Decimal::new(expire_at_ms);
                let bytes = decimal.as_bytes();
                // SAFETY: no context: the module owns the string until it frees it here;
                // propagated copies hold references of their own.
                unsafe {
                    if !last.strings[slot].is_null() {
                        raw::RedisModule_FreeString.unwrap()(
                            std::ptr::null_mut(),
                            last.strings[slot],
                        );
                    }
                    last.strings[slot] = raw::RedisModule_CreateString.unwrap()(
                        std::ptr::null_mut(),
                        bytes.as_ptr().cast(),
                        bytes.len(),
                    );
                }
                last.millis[slot] = expire_at_ms;
                slot
            }
        };
        last.newest = slot;
        last.strings[slot]
    })
}

/// A whole value to propagate: bytes, or the string object just stored (propagated as it is,
/// without a copy).
enum SetValue<'a> {
    Bytes(&'a [u8]),
    String(*mut raw::RedisModuleString),
}

/// An open key holding (or about to hold) a limiter's state. Closed on drop.
pub struct LimiterKey {
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    /// The keyspace event a write fires: the command's.
    event: &'static CStr,
    access: Access,
    /// Whether a write must build its effect: an AOF or a replica may receive it (see
    /// [`propagation`]); false when opened for reading.
    effects: bool,
    /// Null when opened for reading and the key does not exist.
    key: *mut raw::RedisModuleKey,
    /// The key's module value as last looked up (`Some(None)`: none), until the key changes:
    /// a call reads it to decide, then again to change it.
    native: std::cell::Cell<Option<Option<*mut u64>>>,
    /// Whether [`LimiterKey::read`] found no key, which nothing has written since: a new
    /// string then needs no look for one to rewrite in place.
    read_empty: std::cell::Cell<bool>,
}

/// Whether a client's call runs over `maxmemory`, by the context flags: never for what a
/// master or the AOF sends.
fn out_of_memory(flags: c_int) -> bool {
    let flags = flags as u32;
    let applying = raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING;
    flags & raw::REDISMODULE_CTX_FLAGS_OOM != 0 && flags & applying == 0
}

/// Whether `call` may write: Redis' `OOM` error when a client's call runs over `maxmemory`;
/// otherwise whether its writes must build their effects.
///
/// When the server's settings are followed ([`settings`]), or replication has been seen,
/// whether effects are needed is known without the context flags, and they are read only
/// near `maxmemory`: the used-memory ratio is at least 1 whenever Redis counts itself out of
/// memory (the same used memory over the same limit), asking for it costs a fifth of the
/// flags, and without a limit nothing is asked at all.
fn writable(call: &Invocation) -> Result<bool, CommandError> {
    let Some(effects) = propagation::effects_known() else {
        let flags = call.context_flags();
        if out_of_memory(flags) {
            return Err(CommandError::OUT_OF_MEMORY);
        }
        return Ok(propagation::effects_needed(flags));
    };
    if settings::maxmemory_set() {
        // SAFETY: a function pointer Redis filled in at load (6.0+), called on its thread.
        let ratio = unsafe { raw::RedisModule_GetUsedMemoryRatio.map_or(1.0, |ratio| ratio()) };
        if ratio >= 1.0 && out_of_memory(call.context_flags()) {
            return Err(CommandError::OUT_OF_MEMORY);
        }
    }
    Ok(effects)
}

impl LimiterKey {
    /// Opens `name` for `access`. Opening does not create the key, and opening for writing
    /// signals nothing to `WATCH` or client tracking until something is written.
    ///
    /// Over `maxmemory` (after Redis' own evictions), a client's call that may write gets
    /// Redis' `OOM` error, as a `deny-oom` command would; reads still answer, which is why
    /// the commands are not flagged `deny-oom` (Redis would refuse peeks too). What a master
    /// or the AOF sends is always applied, as Redis does for its own commands.
    #[inline(always)]
    pub fn open(
        call: &Invocation,
        name: *mut raw::RedisModuleString,
        access: Access,
    ) -> Result<LimiterKey, CommandError> {
        let ctx = call.ctx;
        let (mode, effects) = match access {
            Access::Read => (raw::REDISMODULE_READ, false),
            Access::Write => (
                raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
                writable(call)?,
            ),
        };
        // SAFETY: `ctx` and `name` come from the running command.
        let key = unsafe { raw::RedisModule_OpenKey.unwrap()(ctx, name, mode as c_int) };
        if key.is_null() && access == Access::Write {
            // Valkey's forkless operations hold a key they are saving: nothing was opened,
            // nothing changes, and the client may retry.
            return Err(CommandError::KEY_BUSY);
        }
        Ok(LimiterKey {
            ctx,
            name,
            event: call.spec.event,
            access,
            effects,
            key,
            native: std::cell::Cell::new(None),
            read_empty: std::cell::Cell::new(false),
        })
    }

    /// The key's value: `None` when the key does not exist, its bytes when it is a string
    /// whose length `state_length` accepts, `WRONGTYPE` for anything else.
    ///
    /// The length is checked before the bytes are touched: reading a string through the key
    /// API converts an integer-encoded value to a raw one (the same bytes, another internal
    /// encoding), and a key that is not ours should be left exactly as it was. Only an
    /// integer whose decimal form has a state's exact length still goes through that
    /// conversion before being refused.
    #[inline(always)]
    pub fn read(
        &self,
        state_length: impl Fn(usize) -> bool,
    ) -> Result<Option<&[u8]>, CommandError> {
        // SAFETY: `self.key` is open (or null, which KeyType accepts).
        let key_type = unsafe { raw::RedisModule_KeyType.unwrap()(self.key) };
        if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            self.read_empty.set(true);
            return Ok(None);
        }
        if key_type != raw::REDISMODULE_KEYTYPE_STRING as c_int
            || !state_length(unsafe { raw::RedisModule_ValueLength.unwrap()(self.key) })
        {
            return Err(CommandError::WRONG_TYPE);
        }
        let mut len = 0;
        let ptr = unsafe {
            raw::RedisModule_StringDMA.unwrap()(self.key, &mut len, raw::REDISMODULE_READ as c_int)
        };
        if ptr.is_null() {
            return Err(CommandError::WRONG_TYPE);
        }
        // SAFETY: DMA gives `len` readable bytes, valid until the key is modified, which
        // `write` (taking `&mut self`) cannot do while this borrow lives.
        Ok(Some(unsafe {
            std::slice::from_raw_parts(ptr.cast::<u8>(), len)
        }))
    }

    /// Stores a limiter's new state, placed as `placement` says, with an absolute expiry
    /// (Unix milliseconds), propagates the change and signals it to `WATCH` and client
    /// tracking. The key must have been opened for [`Access::Write`].
    ///
    /// A whole value (`placement.at == 0`) is propagated as `SET key value PXAT expiry`. The
    /// steady state, this module's string of the same length, is rewritten in place with one
    /// DMA call; a new key, or a value of another length, gets a new string object: Redis
    /// stores a short one as it stores `SET`'s (embedded with the key on Valkey 8+ and Redis
    /// 8), and the same object is what is propagated.
    ///
    /// A patch (the bytes from `placement.at` on, where the key's value is the state the
    /// decision read) is written in place, and propagated as `SETRANGE key at bytes` (with
    /// `PEXPIREAT key expiry` when the expiry moved): what a call costs and sends does not
    /// grow with the state. A value of at most [`PATCH_ABOVE`] bytes goes whole instead, as
    /// one `SET`, which is cheaper than two commands.
    #[inline(always)]
    pub fn write(
        &mut self,
        value: &[u8],
        placement: Placement,
        expire_at_ms: i64,
    ) -> Result<(), CommandError> {
        if self.access != Access::Write {
            return Err(CommandError::INTERNAL); // A bug in the caller: change nothing.
        }
        if placement.at > 0 {
            // SAFETY: a key open for writing, in the running command's context.
            unsafe { self.patch(value, placement, expire_at_ms)? };
            self.signal_modified(raw::REDISMODULE_NOTIFY_STRING);
            return Ok(());
        }
        let ok = raw::Status::Ok as c_int;
        // SAFETY: a key open for writing, in the running command's context.
        unsafe {
            let in_place = if self.read_empty.replace(false) {
                None
            } else {
                self.in_place(value.len())
            };
            match in_place {
                Some(bytes) => {
                    bytes.copy_from_slice(value);
                    if raw::RedisModule_SetAbsExpire.unwrap()(self.key, expire_at_ms) != ok {
                        return Err(self.undo());
                    }
                    self.propagate(|| self.replicate_set(SetValue::Bytes(value), expire_at_ms));
                }
                None => {
                    let string = raw::RedisModule_CreateString.unwrap()(
                        self.ctx,
                        value.as_ptr().cast(),
                        value.len(),
                    );
                    let stored = raw::RedisModule_StringSet.unwrap()(self.key, string) == ok
                        && raw::RedisModule_SetAbsExpire.unwrap()(self.key, expire_at_ms) == ok;
                    if stored {
                        self.propagate(|| {
                            self.replicate_set(SetValue::String(string), expire_at_ms)
                        });
                    }
                    raw::RedisModule_FreeString.unwrap()(self.ctx, string);
                    if !stored {
                        return Err(self.undo());
                    }
                }
            }
        }
        self.signal_modified(raw::REDISMODULE_NOTIFY_STRING);
        Ok(())
    }

    /// Writes `bytes` over the key's string from `placement.at` on (growing or shrinking it
    /// to end with them), and propagates the change; see [`LimiterKey::write`].
    ///
    /// # Safety
    /// The key must be open for writing, in the running command's context.
    unsafe fn patch(
        &mut self,
        bytes: &[u8],
        placement: Placement,
        expire_at_ms: i64,
    ) -> Result<(), CommandError> {
        let ok = raw::Status::Ok as c_int;
        let len = placement.at + bytes.len();
        unsafe {
            // The decision read this key's string, at least `at` bytes long; anything else
            // is a bug, and nothing has changed yet.
            // A patch never shortens the value: SETRANGE could not do the same on replicas.
            let string = raw::REDISMODULE_KEYTYPE_STRING as c_int;
            let stored_len = raw::RedisModule_ValueLength.unwrap()(self.key);
            if raw::RedisModule_KeyType.unwrap()(self.key) != string
                || stored_len < placement.at
                || stored_len > len
            {
                return Err(CommandError::INTERNAL);
            }
            if stored_len != len && raw::RedisModule_StringTruncate.unwrap()(self.key, len) != ok {
                return Err(self.undo());
            }
            let mut dma_len = 0;
            let write = raw::REDISMODULE_WRITE as c_int;
            let ptr = raw::RedisModule_StringDMA.unwrap()(self.key, &mut dma_len, write);
            if ptr.is_null() || dma_len != len {
                return Err(self.undo());
            }
            let whole = std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len);
            whole[placement.at..].copy_from_slice(bytes);
            if !placement.expiry_kept
                && raw::RedisModule_SetAbsExpire.unwrap()(self.key, expire_at_ms) != ok
            {
                return Err(self.undo());
            }
            let whole: &[u8] = whole;
            self.propagate(|| {
                if len <= PATCH_ABOVE {
                    return self.replicate_set(SetValue::Bytes(whole), expire_at_ms);
                }
                let replicate = raw::RedisModule_Replicate.unwrap();
                let offset = Decimal::new(placement.at as i64);
                let offset = offset.as_bytes();
                replicate(
                    self.ctx,
                    c"SETRANGE".as_ptr(),
                    c"sbb".as_ptr(),
                    self.name,
                    offset.as_ptr(),
                    offset.len(),
                    bytes.as_ptr(),
                    bytes.len(),
                );
                if !placement.expiry_kept {
                    replicate(
                        self.ctx,
                        c"PEXPIREAT".as_ptr(),
                        c"ss".as_ptr(),
                        self.name,
                        expiry_string(expire_at_ms),
                    );
                }
            });
        }
        Ok(())
    }

    /// The bytes of the key's string, writable in place, when it has exactly `len` of them.
    ///
    /// # Safety
    /// The key must be open for writing; the bytes are valid until the key changes.
    unsafe fn in_place<'a>(&mut self, len: usize) -> Option<&'a mut [u8]> {
        unsafe {
            let string = raw::REDISMODULE_KEYTYPE_STRING as c_int;
            if raw::RedisModule_KeyType.unwrap()(self.key) != string
                || raw::RedisModule_ValueLength.unwrap()(self.key) != len
            {
                return None;
            }
            let mut dma_len = 0;
            let write = raw::REDISMODULE_WRITE as c_int;
            let ptr = raw::RedisModule_StringDMA.unwrap()(self.key, &mut dma_len, write);
            (!ptr.is_null() && dma_len == len)
                .then(|| std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len))
        }
    }

    /// After a write Redis refused (which it does not for a string key open for writing): the
    /// key must never be left without its expiry, nor differ from the replicas' copy.
    fn undo(&mut self) -> CommandError {
        self.native.set(None);
        // SAFETY: an open key in the running command's context.
        unsafe {
            if raw::RedisModule_DeleteKey.unwrap()(self.key) == raw::Status::Ok as c_int {
                self.replicate_delete();
            }
        }
        CommandError::INTERNAL
    }

    /// Deletes the key and signals the change with the event `class`; propagating it is the
    /// caller's ([`LimiterKey::replicate_delete`]). The key must have been opened for
    /// [`Access::Write`].
    pub fn delete(&mut self, class: c_int) -> Result<(), CommandError> {
        if self.access != Access::Write {
            return Err(CommandError::INTERNAL);
        }
        self.native.set(None);
        self.read_empty.set(false);
        // SAFETY: an open key; deleting a missing key is a no-op Redis accepts.
        let deleted = unsafe { raw::RedisModule_DeleteKey.unwrap()(self.key) };
        if deleted != raw::Status::Ok as c_int {
            return Err(CommandError::INTERNAL);
        }
        self.signal_modified(class);
        Ok(())
    }

    /// Propagates `SET key value PXAT expire_at_ms`: a whole value, with its absolute expiry.
    fn replicate_set(&self, value: SetValue, expire_at_ms: i64) {
        let expiry = expiry_string(expire_at_ms);
        // SAFETY: the running command's context and key; the bytes outlive the call, which
        // copies them.
        unsafe {
            let replicate = raw::RedisModule_Replicate.unwrap();
            match value {
                SetValue::Bytes(bytes) => replicate(
                    self.ctx,
                    c"SET".as_ptr(),
                    c"sbss".as_ptr(),
                    self.name,
                    bytes.as_ptr(),
                    bytes.len(),
                    shared_pxat(),
                    expiry,
                ),
                SetValue::String(string) => replicate(
                    self.ctx,
                    c"SET".as_ptr(),
                    c"ssss".as_ptr(),
                    self.name,
                    string,
                    shared_pxat(),
                    expiry,
                ),
            };
        }
    }

    /// Propagates `DEL key`.
    pub fn replicate_delete(&self) {
        // SAFETY: the running command's context and key.
        unsafe {
            raw::RedisModule_Replicate.unwrap()(
                self.ctx,
                c"DEL".as_ptr(),
                c"s".as_ptr(),
                self.name,
            );
        }
    }

    /// The key's name, one of the call's arguments.
    pub fn name(&self) -> *mut raw::RedisModuleString {
        self.name
    }

    /// Propagates a write of this key with `replicate`, which builds its effect, when an
    /// AOF or a replica may receive it; otherwise only counts the change (see
    /// [`propagation`]).
    pub fn propagate(&self, replicate: impl FnOnce()) {
        if self.effects {
            replicate();
        } else {
            // SAFETY: the running command's context.
            unsafe { propagation::count_without_effect(self.ctx) };
        }
    }
}

impl LimiterKey {
    /// The key's native value (the module's data type): `None` when the key does not exist,
    /// `WRONGTYPE` for any other value.
    pub fn native_value(&self) -> Result<Option<*mut u64>, CommandError> {
        if let Some(known) = self.native.get() {
            return Ok(known);
        }
        // SAFETY: `self.key` is open (or null, which both functions accept).
        let value = unsafe {
            match raw::RedisModule_KeyType.unwrap()(self.key) as isize {
                raw::REDISMODULE_KEYTYPE_EMPTY => None,
                raw::REDISMODULE_KEYTYPE_MODULE
                    if raw::RedisModule_ModuleTypeGetType.unwrap()(self.key) == native_type() =>
                {
                    Some(raw::RedisModule_ModuleTypeGetValue.unwrap()(self.key).cast())
                }
                _ => return Err(CommandError::WRONG_TYPE),
            }
        };
        self.native.set(Some(value));
        Ok(value)
    }

    /// The key's native value of kind `T`, read in place; `WRONGTYPE` when the key holds
    /// another kind (or another type).
    pub fn native_view<T: Native>(&self) -> Result<Option<View<T>>, CommandError> {
        match self.native_value()? {
            None => Ok(None),
            // SAFETY: the key's own value, unchanged while the key is open.
            Some(raw) => unsafe { View::of(raw) }
                .map(Some)
                .ok_or(CommandError::WRONG_TYPE),
        }
    }

    /// The key's native value of kind `T`, to change: it goes back to the key when the
    /// borrow ends. `None` when the key does not exist. The key must be open for writing.
    pub fn native_borrow<T: Native>(&mut self) -> Result<Option<Borrowed<T>>, CommandError> {
        if self.access != Access::Write {
            return Err(CommandError::INTERNAL);
        }
        let value = self.native_value()?;
        // The change may move the value: look it up again next time.
        self.native.set(None);
        match value {
            None => Ok(None),
            // SAFETY: the kind is checked first; the key stays open for writing while the
            // borrow (which holds it) lives.
            Some(raw) if unsafe { raw_kind(raw) } == T::KIND => {
                Ok(Some(unsafe { Borrowed::new(self.key, raw) }))
            }
            Some(_) => Err(CommandError::WRONG_TYPE),
        }
    }

    /// Stores `value` in the key, which must be open for writing and empty; Redis owns it
    /// from then on and frees it with the type's `free` callback.
    pub fn set_native<T: Native>(&mut self, value: T) -> Result<(), CommandError> {
        if self.access != Access::Write {
            return Err(CommandError::INTERNAL);
        }
        let raw = value.into_raw();
        self.native.set(None);
        self.read_empty.set(false);
        // SAFETY: a key open for writing; on failure the value is still ours to free.
        let status = unsafe {
            raw::RedisModule_ModuleTypeSetValue.unwrap()(self.key, native_type(), raw.cast())
        };
        if status != raw::Status::Ok as c_int {
            drop(unsafe { T::from_raw(raw) });
            return Err(CommandError::INTERNAL);
        }
        Ok(())
    }

    /// After the key's module value was changed in place: sets its absolute expiry (Unix
    /// ms) and signals the change to `WATCH` and client tracking. Propagating the change is
    /// the caller's.
    pub fn changed_in_place(&mut self, expire_at_ms: Option<i64>) -> Result<(), CommandError> {
        if self.access != Access::Write {
            return Err(CommandError::INTERNAL);
        }
        if let Some(expire_at_ms) = expire_at_ms {
            // SAFETY: an open key holding a value.
            let status = unsafe { raw::RedisModule_SetAbsExpire.unwrap()(self.key, expire_at_ms) };
            if status != raw::Status::Ok as c_int {
                return Err(CommandError::INTERNAL);
            }
        }
        self.signal_modified(raw::REDISMODULE_NOTIFY_MODULE);
        Ok(())
    }

    /// Tells `WATCH`, client tracking and keyspace-event subscribers that the key changed.
    /// The event is the command's name, in the class of the key's type (`$` for strings, `d`
    /// for the module's type), as Redis' own commands and other modules' do. With
    /// notifications off, Redis returns at its first check.
    pub fn signal_modified(&self, class: c_int) {
        // SAFETY: the context and name of the running command; the event is a C string.
        unsafe {
            raw::RedisModule_SignalModifiedKey.unwrap()(self.ctx, self.name);
            raw::RedisModule_NotifyKeyspaceEvent.unwrap()(
                self.ctx,
                class,
                self.event.as_ptr(),
                self.name,
            );
        }
    }
}

impl Drop for LimiterKey {
    fn drop(&mut self) {
        // SAFETY: CloseKey accepts null, and the key is closed once.
        unsafe { raw::RedisModule_CloseKey.unwrap()(self.key) };
    }
}
