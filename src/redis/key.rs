//! One open key, through the server's low-level key API: what it holds, its string read and
//! rewritten in place, a new string or native value stored, an absolute expiry, a deletion,
//! and the signal that it changed. Every call into the key API is here; what a limiter
//! makes of them is [`super::store`]'s.

use std::cell::Cell;
use std::ffi::{c_int, CStr};
use std::ptr;

use redis_module::raw;

use crate::core::ring::{kind_of, Native};
use crate::core::time::Millis;
use crate::redis::call::{Invocation, KeyName};
use crate::redis::native_type::{native_type, Borrowed, View};
use crate::redis::string::OwnedString;

/// What a key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// Nothing: the key does not exist.
    Nothing,
    /// A string of this many bytes.
    String(usize),
    /// A value of the module's type.
    Native,
    /// Anything else.
    Other,
}

/// The keyspace-event class of a write: the class of the key's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventClass {
    /// `$`: a string.
    String,
    /// `d`: a module type.
    Module,
}

/// An open key. Closed when dropped.
pub struct OpenKey {
    ctx: *mut raw::RedisModuleCtx,
    name: KeyName,
    /// Null when opened for reading and the key does not exist.
    key: *mut raw::RedisModuleKey,
    writable: bool,
    /// What the key holds: read when it is opened, kept up to date by every change made
    /// through this handle (a call reads it to decide, then again to change it).
    held: Held,
    /// The key's module value when it holds one, once looked up (null until then, and
    /// after a change that may have moved it).
    native: Cell<*mut u64>,
}

impl OpenKey {
    /// Opens `name` for the running `call`, for writing when `writable`. Opening does not
    /// create the key, and opening for writing signals nothing until something is written.
    /// `None` when the server gives no key to write (Valkey's forkless operations hold a
    /// key they are saving).
    pub fn open(call: &Invocation, name: KeyName, writable: bool) -> Option<OpenKey> {
        let mode = if writable {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        // SAFETY: the running command's context and one of its arguments.
        let key = unsafe { raw::RedisModule_OpenKey.unwrap()(call.ctx(), name.0, mode as c_int) };
        if key.is_null() && writable {
            return None;
        }
        let mut open = OpenKey {
            ctx: call.ctx(),
            name,
            key,
            writable,
            held: Held::Nothing,
            native: Cell::new(ptr::null_mut()),
        };
        open.held = open.read_held();
        Some(open)
    }

    /// The key's name.
    pub fn name(&self) -> KeyName {
        self.name
    }

    /// Whether it was opened for writing.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// What the key holds.
    pub fn held(&self) -> Held {
        self.held
    }

    /// What the key holds, asked of the server.
    fn read_held(&self) -> Held {
        // SAFETY: an open key, or null, which KeyType accepts.
        let key_type = unsafe { raw::RedisModule_KeyType.unwrap()(self.key) } as isize;
        match key_type {
            raw::REDISMODULE_KEYTYPE_EMPTY => Held::Nothing,
            raw::REDISMODULE_KEYTYPE_STRING => {
                // SAFETY: an open key holding a string.
                Held::String(unsafe { raw::RedisModule_ValueLength.unwrap()(self.key) })
            }
            raw::REDISMODULE_KEYTYPE_MODULE if self.holds_module_type() => Held::Native,
            _ => Held::Other,
        }
    }

    /// The key's string, read in place; `None` when it holds no string. Reading converts
    /// an integer-encoded value to a raw one (the same bytes), which is why callers check
    /// the length ([`OpenKey::held`]) first.
    pub fn string(&self) -> Option<&[u8]> {
        let mut len = 0;
        // SAFETY: an open key (a string, per the callers' check); the mode reads.
        let ptr = unsafe {
            raw::RedisModule_StringDMA.unwrap()(self.key, &mut len, raw::REDISMODULE_READ as c_int)
        };
        // SAFETY: the server gives `len` readable bytes, valid until the key changes, which
        // takes `&mut self`.
        (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }

    /// The key's string to write in place, when it holds one of exactly `len` bytes.
    pub fn string_mut(&mut self, len: usize) -> Option<&mut [u8]> {
        if !self.writable || self.held() != Held::String(len) {
            return None;
        }
        let mut dma_len = 0;
        let write = raw::REDISMODULE_WRITE as c_int;
        // SAFETY: a key open for writing, holding a string.
        let ptr = unsafe { raw::RedisModule_StringDMA.unwrap()(self.key, &mut dma_len, write) };
        // SAFETY: the server gives `dma_len` writable bytes, valid until the key changes,
        // which this borrow of `self` prevents.
        (!ptr.is_null() && dma_len == len)
            .then(|| unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) })
    }

    /// Grows or shrinks the key's string to `len` bytes; false if the server refuses.
    pub fn resize_string(&mut self, len: usize) -> bool {
        // SAFETY: a key open for writing (the server refuses otherwise).
        let resized = self.writable
            && unsafe { raw::RedisModule_StringTruncate.unwrap()(self.key, len) }
                == raw::Status::Ok as c_int;
        if resized {
            self.held = Held::String(len);
        }
        resized
    }

    /// Stores `bytes` as a new string, replacing the key's value (and its expiry); returns
    /// the string object, which is what a propagated `SET` can send without a copy. `None`
    /// if the server refuses.
    pub fn set_string(&mut self, bytes: &[u8]) -> Option<OwnedString> {
        if !self.writable {
            return None;
        }
        // SAFETY: the running command's context; the server copies the bytes.
        let created = unsafe {
            raw::RedisModule_CreateString.unwrap()(self.ctx, bytes.as_ptr().cast(), bytes.len())
        };
        // SAFETY: just created in this context, and owned by nothing else.
        let string = unsafe { OwnedString::new(self.ctx, created) };
        // SAFETY: a key open for writing; the server takes its own reference to the string.
        let stored = unsafe { raw::RedisModule_StringSet.unwrap()(self.key, string.as_ptr()) };
        if stored != raw::Status::Ok as c_int {
            return None;
        }
        self.held = Held::String(bytes.len());
        self.native.set(ptr::null_mut());
        Some(string)
    }

    /// Sets the key's absolute expiry; false if the server refuses.
    pub fn set_expiry(&mut self, expire_at: Millis) -> bool {
        // SAFETY: an open key holding a value (the server refuses otherwise).
        self.writable
            && unsafe { raw::RedisModule_SetAbsExpire.unwrap()(self.key, expire_at.0) }
                == raw::Status::Ok as c_int
    }

    /// Deletes the key; false if the server refuses.
    pub fn delete(&mut self) -> bool {
        // SAFETY: an open key; deleting a missing key is a no-op the server accepts.
        let deleted = self.writable
            && unsafe { raw::RedisModule_DeleteKey.unwrap()(self.key) } == raw::Status::Ok as c_int;
        if deleted {
            self.held = Held::Nothing;
            self.native.set(ptr::null_mut());
        }
        deleted
    }

    /// Whether the key's module value is of this module's type.
    fn holds_module_type(&self) -> bool {
        // SAFETY: an open key holding a module value.
        unsafe { raw::RedisModule_ModuleTypeGetType.unwrap()(self.key) == native_type() }
    }

    /// The key's value of the module's type, if it holds one of kind `T`, read in place.
    pub fn native<T: Native>(&self) -> Option<View<'_, T>> {
        let raw = self.native_raw()?;
        // SAFETY: the key's own value, alive and unchanged while this borrow of the key
        // lives.
        unsafe { View::of(raw) }
    }

    /// Whether the key holds a value of the module's type of another kind than `T`.
    pub fn holds_other_native<T: Native>(&self) -> bool {
        // SAFETY: the key's own value, alive while the key is open.
        self.native_raw()
            .is_some_and(|raw| kind_of(unsafe { *raw }) != T::KIND)
    }

    /// The key's value of kind `T`, to change: it goes back to the key when the borrow ends.
    pub fn native_mut<T: Native>(&mut self) -> Option<Borrowed<'_, T>> {
        if !self.writable {
            return None;
        }
        let raw = self.native_raw()?;
        // SAFETY: the kind is checked first; the key stays open for writing while the
        // borrow (which holds it mutably) lives.
        if kind_of(unsafe { *raw }) != T::KIND {
            return None;
        }
        // The change may move the value: it is looked up again next time.
        self.native.set(ptr::null_mut());
        // SAFETY: as above.
        Some(unsafe { Borrowed::new(self.key, raw) })
    }

    /// Stores `value` in the key, which must be empty and open for writing; the server owns
    /// it from then on and frees it with the type's `free` callback. False (and `value`
    /// freed) if the server refuses.
    pub fn set_native<T: Native>(&mut self, value: T) -> bool {
        if !self.writable {
            return false;
        }
        let raw = crate::redis::native_type::hand_over(value);
        // SAFETY: a key open for writing; on failure the value is still ours to free.
        let status = unsafe {
            raw::RedisModule_ModuleTypeSetValue.unwrap()(self.key, native_type(), raw.cast())
        };
        if status != raw::Status::Ok as c_int {
            // SAFETY: the allocation just handed over and refused, taken back once.
            drop(unsafe { crate::redis::native_type::take_back::<T>(raw) });
            return false;
        }
        self.held = Held::Native;
        self.native.set(raw);
        true
    }

    /// The key's module value, when it holds one of the module's type.
    fn native_raw(&self) -> Option<*mut u64> {
        if self.held != Held::Native {
            return None;
        }
        if self.native.get().is_null() {
            // SAFETY: an open key holding a value of the module's type.
            let value = unsafe { raw::RedisModule_ModuleTypeGetValue.unwrap()(self.key) };
            self.native.set(value.cast());
        }
        Some(self.native.get())
    }

    /// Tells `WATCH`, client tracking and keyspace-event subscribers that the key changed:
    /// the event `event` (the command's name), in `class`. With notifications off, the
    /// server returns at its first check.
    pub fn signal_modified(&self, event: &CStr, class: EventClass) {
        let class = match class {
            EventClass::String => raw::REDISMODULE_NOTIFY_STRING,
            EventClass::Module => raw::REDISMODULE_NOTIFY_MODULE,
        };
        // SAFETY: the running command's context and one of its arguments; the event is a C
        // string.
        unsafe {
            raw::RedisModule_SignalModifiedKey.unwrap()(self.ctx, self.name.0);
            raw::RedisModule_NotifyKeyspaceEvent.unwrap()(
                self.ctx,
                class as c_int,
                event.as_ptr(),
                self.name.0,
            );
        }
    }
}

impl Drop for OpenKey {
    fn drop(&mut self) {
        // SAFETY: CloseKey accepts null, and the key is closed once.
        unsafe { raw::RedisModule_CloseKey.unwrap()(self.key) };
        self.key = ptr::null_mut();
    }
}
