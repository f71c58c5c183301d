//! One open key, through the server's low-level key API: what it holds, its string read and
//! rewritten in place, a new string or native value stored, an absolute expiry, a deletion,
//! and the signal that it changed. Every call into the key API is here; what a limiter
//! makes of them is [`super::store`]'s.

use std::cell::Cell;
use std::ffi::CStr;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::core::ring::{kind_of, Native};
use crate::core::time::Millis;
use crate::redis::api::{self, Ctx, KeyHandle, KeyType};
use crate::redis::call::{Invocation, KeyName};
use crate::redis::native_type::{native_type, Borrowed, View};

pub use crate::redis::api::EventClass;

/// A write of a key the tests make fail once (`RL.DEBUG.FAIL`), to show that a failed write
/// leaves master and replicas alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FailNext {
    /// Nothing fails.
    Nothing = 0,
    /// The next expiry set.
    Expiry = 1,
    /// The next deletion.
    Delete = 2,
}

/// The write the tests make fail next: only `RL.DEBUG.FAIL` sets it.
static FAIL_NEXT: AtomicU8 = AtomicU8::new(FailNext::Nothing as u8);

/// Whether a new string key is made in place (`RedisModule_StringTruncate`, then written
/// through direct memory access): on Redis that costs 16 bytes less than the embedded string
/// `RedisModule_StringSet` (and `SET`) makes of 13 to 28 bytes. Valkey 9 embeds a value in
/// its key's object, and a value written through direct memory access is a separate
/// allocation, 8 bytes more than `SET`'s, so there a new key is made as `SET` makes it. Set
/// once at load.
static CREATE_IN_PLACE: AtomicBool = AtomicBool::new(true);

/// Whether new string keys are made in place on this server (see `CREATE_IN_PLACE`).
pub fn create_strings_in_place(in_place: bool) {
    CREATE_IN_PLACE.store(in_place, Ordering::Relaxed);
}

/// Makes the next write of kind `fail` fail, as if the server refused it.
pub fn fail_next(fail: FailNext) {
    FAIL_NEXT.store(fail as u8, Ordering::Relaxed);
}

/// Whether a write of kind `fail` is to fail now (once).
fn fails(fail: FailNext) -> bool {
    FAIL_NEXT.load(Ordering::Relaxed) == fail as u8 && {
        FAIL_NEXT.store(FailNext::Nothing as u8, Ordering::Relaxed);
        true
    }
}

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

/// An open key. Closed when dropped.
pub struct OpenKey<'a> {
    ctx: Ctx<'a>,
    name: KeyName<'a>,
    /// `None` when opened for reading and the key does not exist.
    key: Option<KeyHandle<'a>>,
    writable: bool,
    /// What the key holds: read when it is opened, kept up to date by every change made
    /// through this handle (a call reads it to decide, then again to change it).
    held: Held,
    /// The key's module value when it holds one, once looked up (null until then, and
    /// after a change that may have moved it).
    native: Cell<*mut u64>,
}

impl<'a> OpenKey<'a> {
    /// Opens `name` for the running `call`, for writing when `writable`. Opening does not
    /// create the key, and opening for writing signals nothing until something is written.
    /// `None` when the server gives no key to write (Valkey's forkless operations hold a
    /// key they are saving).
    pub fn open(call: &Invocation<'a>, name: KeyName<'a>, writable: bool) -> Option<OpenKey<'a>> {
        let key = api::open_key(call.ctx(), name, writable);
        if key.is_none() && writable {
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
    pub fn name(&self) -> KeyName<'a> {
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

    /// The key, open for writing.
    fn for_writing(&mut self) -> Option<&mut KeyHandle<'a>> {
        self.key.as_mut().filter(|_| self.writable)
    }

    /// What the key holds, asked of the server.
    fn read_held(&self) -> Held {
        let Some(key) = &self.key else {
            return Held::Nothing;
        };
        match key.key_type() {
            KeyType::Empty => Held::Nothing,
            KeyType::String => Held::String(key.value_length()),
            KeyType::Module if key.module_type() == native_type() => Held::Native,
            KeyType::Module | KeyType::Other => Held::Other,
        }
    }

    /// The key's string, read in place; `None` when it holds no string. Reading converts
    /// an integer-encoded value to a raw one (the same bytes), which is why callers check
    /// the length ([`OpenKey::held`]) first.
    pub fn string(&self) -> Option<&[u8]> {
        self.key.as_ref()?.string_dma()
    }

    /// The key's string to write in place, when it holds one of exactly `len` bytes, or,
    /// if `create` and the server makes new strings in place (`CREATE_IN_PLACE`), holds
    /// nothing: a new key then gets a string of `len` zeros (`RedisModule_StringTruncate`),
    /// the raw string a rewrite in place leaves.
    pub fn string_mut(&mut self, len: usize, create: bool) -> Option<&mut [u8]> {
        match self.held() {
            Held::String(held) if held == len => {}
            Held::Nothing
                if create
                    && len > 0
                    && CREATE_IN_PLACE.load(Ordering::Relaxed)
                    && self.resize_string(len) => {}
            _ => return None,
        }
        self.for_writing()?
            .string_dma_mut()
            .filter(|bytes| bytes.len() == len)
    }

    /// Grows or shrinks the key's string to `len` bytes; false if the server refuses.
    pub fn resize_string(&mut self, len: usize) -> bool {
        let resized = self
            .for_writing()
            .is_some_and(|key| key.string_truncate(len));
        if resized {
            self.held = Held::String(len);
        }
        resized
    }

    /// Stores `bytes` as a new string, replacing the key's value (and its expiry); returns
    /// the string object, which is what a propagated `SET` can send without a copy. `None`
    /// if the server refuses.
    pub fn set_string(&mut self, bytes: &[u8]) -> Option<api::OwnedString> {
        let key = self.for_writing()?;
        let string = api::OwnedString::new(bytes);
        if !key.string_set(&string) {
            return None;
        }
        self.held = Held::String(bytes.len());
        self.native.set(ptr::null_mut());
        Some(string)
    }

    /// Sets the key's absolute expiry; false if the server refuses.
    pub fn set_expiry(&mut self, expire_at: Millis) -> bool {
        if fails(FailNext::Expiry) {
            return false;
        }
        self.for_writing()
            .is_some_and(|key| key.set_abs_expire(expire_at.get()))
    }

    /// Deletes the key; false if the server refuses.
    pub fn delete(&mut self) -> bool {
        if fails(FailNext::Delete) {
            return false;
        }
        let deleted = self.for_writing().is_some_and(KeyHandle::delete);
        if deleted {
            self.held = Held::Nothing;
            self.native.set(ptr::null_mut());
        }
        deleted
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
    pub fn native_mut<T: Native>(&mut self) -> Option<Borrowed<'_, 'a, T>> {
        let raw = self.native_raw()?;
        // SAFETY: the key's own value, alive while the key is open.
        if kind_of(unsafe { *raw }) != T::KIND {
            return None;
        }
        // The change may move the value: it is looked up again next time.
        self.native.set(ptr::null_mut());
        let key = self.for_writing()?;
        // SAFETY: the key's value, of the module's type and kind `T`; the key stays open
        // for writing while the borrow (which holds it mutably) lives.
        Some(unsafe { Borrowed::new(key, raw) })
    }

    /// Stores `value` in the key, which must be empty and open for writing; the server owns
    /// it from then on and frees it with the type's `free` callback. False (and `value`
    /// freed) if the server refuses.
    pub fn set_native<T: Native>(&mut self, value: T) -> bool {
        let Some(key) = self.for_writing() else {
            return false;
        };
        let raw = crate::redis::native_type::hand_over(value);
        // SAFETY: a value of the module's type, which its `free` callback frees; on failure
        // it is still ours.
        if !unsafe { key.set_module_value(native_type(), raw.cast()) } {
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
            self.native.set(self.key.as_ref()?.module_value().cast());
        }
        Some(self.native.get())
    }

    /// Tells `WATCH`, client tracking and keyspace-event subscribers that the key changed:
    /// the event `event` (the command's name), in `class`. With notifications off, the
    /// server returns at its first check.
    pub fn signal_modified(&self, event: &CStr, class: EventClass) {
        api::signal_modified_key(self.ctx, self.name);
        api::notify_keyspace_event(self.ctx, class, event, self.name);
    }
}
