//! The module API as this crate calls it: one function per server API it uses, each taking
//! typed handles ([`Ctx`], [`ServerStr`], [`KeyHandle`], [`Io`], ...) instead of raw pointers,
//! so that the rest of the FFI layer makes no raw call of its own. This file is the only one
//! that names a `RedisModule_*` function.
//!
//! The functions are resolved once, at load: the server fills the SDK's table of function
//! pointers ([`init`]), and [`init`] then checks that every function the commands cannot do
//! without is present (the list below), refusing to load otherwise. A required function is
//! then called without a check; an optional one (newer servers only) answers `None` or
//! `false` where the server lacks it.
//!
//! A handle is made only from what the server passed to a callback (`unsafe fn from_raw`,
//! whose contract the callback's caller meets), or by a function here; it cannot outlive the
//! callback it came from (its lifetime), and the few functions whose contract no type can
//! carry (handing the server a value it will free) are `unsafe fn` with a `# Safety` section.

use std::ffi::{c_char, c_int, c_longlong, c_uint, c_void, CStr};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use redis_module::raw;

pub use raw::{
    RedisModuleCommandArg as CommandArg, RedisModuleCommandInfo as CommandInfo,
    RedisModuleCommandKeySpec as CommandKeySpec, RedisModuleConfigChange as ConfigChange,
    RedisModuleEvent as ServerEvent, RedisModuleTypeMethods as TypeMethods,
};

/// The status the server's functions answer on success.
const OK: c_int = raw::Status::Ok as c_int;

/// Reads a required function from the table the server filled in at load.
macro_rules! required {
    ($name:ident) => {{
        // Inside an `unsafe` block of the caller's, this block is nested: allowed.
        #[allow(unused_unsafe)]
        // SAFETY: `init` refused to load unless the server filled this entry in, and the
        // table is written only at load, before any command or callback runs.
        let function = unsafe { raw::$name.unwrap_unchecked() };
        function
    }};
}

/// Reads an optional function (one that older servers lack) from the same table.
macro_rules! optional {
    ($name:ident) => {{
        #[allow(unused_unsafe)]
        // SAFETY: the table is written only at load, before any command or callback runs.
        let function = unsafe { raw::$name };
        function
    }};
}

/// Lists the functions the module cannot load without, and the check of them.
macro_rules! required_functions {
    ($($name:ident),* $(,)?) => {
        /// The first required function the server lacks, if any: Redis 7.0 and newer, and
        /// Valkey, have them all.
        fn first_missing() -> Option<&'static str> {
            $(
                // SAFETY: a read of the table the server has just filled in, at load.
                if unsafe { raw::$name }.is_none() {
                    return Some(stringify!($name));
                }
            )*
            None
        }
    };
}

required_functions!(
    RedisModule_CreateCommand,
    RedisModule_SetModuleOptions,
    RedisModule_CreateDataType,
    RedisModule_StringPtrLen,
    RedisModule_OpenKey,
    RedisModule_CloseKey,
    RedisModule_KeyType,
    RedisModule_ValueLength,
    RedisModule_StringDMA,
    RedisModule_StringSet,
    RedisModule_StringTruncate,
    RedisModule_CreateString,
    RedisModule_FreeString,
    RedisModule_DeleteKey,
    RedisModule_SetAbsExpire,
    RedisModule_Replicate,
    RedisModule_SignalModifiedKey,
    RedisModule_NotifyKeyspaceEvent,
    RedisModule_IsKeysPositionRequest,
    RedisModule_KeyAtPos,
    RedisModule_ReplyWithArray,
    RedisModule_ReplyWithLongLong,
    RedisModule_ReplyWithError,
    RedisModule_ReplyWithStringBuffer,
    RedisModule_WrongArity,
    RedisModule_ReplyWithSimpleString,
    RedisModule_GetContextFlags,
    RedisModule_ReplicateVerbatim,
    RedisModule_ModuleTypeGetType,
    RedisModule_ModuleTypeGetValue,
    RedisModule_ModuleTypeSetValue,
    RedisModule_ModuleTypeReplaceValue,
    RedisModule_SaveUnsigned,
    RedisModule_LoadUnsigned,
    RedisModule_SaveStringBuffer,
    RedisModule_LoadStringBuffer,
    RedisModule_IsIOError,
    RedisModule_Free,
    RedisModule_EmitAOF,
    RedisModule_DigestAddStringBuffer,
    RedisModule_DigestEndSequence,
    RedisModule_GetRandomBytes,
);

/// Why the module cannot load on this server.
#[derive(Debug, PartialEq, Eq)]
pub enum InitError {
    /// A module of this name is loaded already (a second `MODULE LOAD`).
    Busy,
    /// The server refused to initialize the module API.
    Refused,
    /// The server lacks a function the commands need (named).
    Missing(&'static str),
}

/// Fills in the function table from the server's context at load, registers the module as
/// `name` at `version`, and checks that every [`REQUIRED`] function is present.
///
/// Nothing may allocate before this (the global allocator is the server's own), and a second
/// load of the same library shares this one's statics, so a busy name is checked before
/// anything else is touched.
///
/// # Safety
/// Only `RedisModule_OnLoad` calls it, once per load, with the server's context.
pub unsafe fn init(ctx: Ctx<'_>, name: &CStr, version: c_int) -> Result<(), InitError> {
    // SAFETY: the server's context for this load, given to fill in the API's pointers.
    unsafe { raw::Export_RedisModule_InitAPI(ctx.raw) };
    // SAFETY: a function pointer just filled in, only read; the name is a C string.
    let busy = optional!(RedisModule_IsModuleNameBusy)
        .is_some_and(|is_busy| unsafe { is_busy(name.as_ptr()) } != 0);
    if busy {
        return Err(InitError::Busy);
    }
    // SAFETY: the server's context for this load; the name is a C string it copies.
    let initialized = unsafe {
        raw::Export_RedisModule_Init(
            ctx.raw,
            name.as_ptr(),
            version,
            raw::REDISMODULE_APIVER_1 as c_int,
        )
    };
    if initialized != OK {
        return Err(InitError::Refused);
    }
    first_missing().map_or(Ok(()), |name| Err(InitError::Missing(name)))
}

// --- Handles --------------------------------------------------------------------------------

/// A server context: a command call's, `OnLoad`'s, or a server event's, valid while the
/// callback that received it runs (`'a`), on the thread the server called it on.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    raw: *mut raw::RedisModuleCtx,
    _callback: PhantomData<&'a ()>,
}

impl Ctx<'_> {
    /// The context the server passed to a callback.
    ///
    /// # Safety
    /// `raw` must be the server's context for the running callback, and the handle must not
    /// be used after the callback returns.
    pub unsafe fn from_raw(raw: *mut raw::RedisModuleCtx) -> Self {
        Ctx {
            raw,
            _callback: PhantomData,
        }
    }
}

/// A server string the module does not own: a call's argument, a key's name. Valid for
/// `'a`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct ServerStr<'a> {
    raw: NonNull<raw::RedisModuleString>,
    _owner: PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> ServerStr<'a> {
    /// A string the server passed to a callback; `None` for a null pointer.
    ///
    /// # Safety
    /// `raw` must be null or a live server string that outlives `'a`.
    pub unsafe fn from_raw(raw: *mut raw::RedisModuleString) -> Option<Self> {
        NonNull::new(raw).map(|raw| ServerStr {
            raw,
            _owner: PhantomData,
        })
    }

    /// The strings of a callback's `argv`.
    ///
    /// # Safety
    /// `argv` must hold `argc` live, non-null server strings that outlive `'a`.
    pub unsafe fn slice(argv: *mut *mut raw::RedisModuleString, argc: usize) -> &'a [Self] {
        if argv.is_null() || argc == 0 {
            return &[];
        }
        // SAFETY: per the caller; `ServerStr` is a transparent non-null pointer.
        unsafe { std::slice::from_raw_parts(argv.cast::<ServerStr<'a>>(), argc) }
    }

    /// Its bytes, borrowed (`RedisModule_StringPtrLen`).
    pub fn bytes(self) -> &'a [u8] {
        let mut len = 0;
        // SAFETY: a live string.
        let ptr = unsafe { required!(RedisModule_StringPtrLen)(self.raw.as_ptr(), &mut len) };
        if ptr.is_null() || len == 0 {
            &[]
        } else {
            // SAFETY: the server gives `len` readable bytes, alive as long as the string.
            unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
        }
    }

    fn as_ptr(self) -> *mut raw::RedisModuleString {
        self.raw.as_ptr()
    }
}

/// A server string the module owns (made by [`OwnedString::new`]), freed when dropped. The
/// server takes references of its own to what it keeps (a stored value, a propagated
/// argument), so dropping this one never frees what the server still uses.
pub struct OwnedString {
    raw: NonNull<raw::RedisModuleString>,
}

// SAFETY: the module only touches server strings while it runs a command or a callback,
// which the server serialises (its main thread, or the global lock): never two threads at
// once.
unsafe impl Send for OwnedString {}

impl OwnedString {
    /// A new string holding a copy of `bytes` (`RedisModule_CreateString`, with no context:
    /// the module's until dropped).
    pub fn new(bytes: &[u8]) -> OwnedString {
        // SAFETY: no context; the server copies the bytes.
        let raw = unsafe {
            required!(RedisModule_CreateString)(ptr::null_mut(), bytes.as_ptr().cast(), bytes.len())
        };
        OwnedString {
            raw: NonNull::new(raw).expect("the server's allocator aborts rather than fail"),
        }
    }

    /// The string, borrowed.
    pub fn as_str(&self) -> ServerStr<'_> {
        ServerStr {
            raw: self.raw,
            _owner: PhantomData,
        }
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        // SAFETY: made by `new` with no context, freed once: this handle's reference only.
        unsafe { required!(RedisModule_FreeString)(ptr::null_mut(), self.raw.as_ptr()) };
    }
}

/// An open key, closed when dropped.
pub struct KeyHandle<'a> {
    raw: NonNull<raw::RedisModuleKey>,
    _ctx: PhantomData<Ctx<'a>>,
}

/// What a key holds, as the key API says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    /// Nothing.
    Empty,
    /// A string.
    String,
    /// A module's value.
    Module,
    /// Anything else.
    Other,
}

/// Opens `name` in the running call's context, for writing when `write` (then creating
/// nothing until something is written). `None` when the key is missing and opened for
/// reading, or when the server gives no key to write (Valkey's forkless operations hold a
/// key they are saving).
pub fn open_key<'a>(ctx: Ctx<'a>, name: ServerStr<'_>, write: bool) -> Option<KeyHandle<'a>> {
    let mode = if write {
        raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
    } else {
        raw::REDISMODULE_READ
    };
    // SAFETY: the running call's context and a live string.
    let key = unsafe { required!(RedisModule_OpenKey)(ctx.raw, name.as_ptr(), mode as c_int) };
    NonNull::new(key).map(|raw| KeyHandle {
        raw,
        _ctx: PhantomData,
    })
}

impl Drop for KeyHandle<'_> {
    fn drop(&mut self) {
        // SAFETY: an open key, closed once.
        unsafe { required!(RedisModule_CloseKey)(self.raw.as_ptr()) };
    }
}

impl KeyHandle<'_> {
    fn as_ptr(&self) -> *mut raw::RedisModuleKey {
        self.raw.as_ptr()
    }

    /// What the key holds (`RedisModule_KeyType`).
    pub fn key_type(&self) -> KeyType {
        // SAFETY: an open key.
        let key_type = unsafe { required!(RedisModule_KeyType)(self.as_ptr()) } as isize;
        match key_type {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyType::Empty,
            raw::REDISMODULE_KEYTYPE_STRING => KeyType::String,
            raw::REDISMODULE_KEYTYPE_MODULE => KeyType::Module,
            _ => KeyType::Other,
        }
    }

    /// The length of its value (`RedisModule_ValueLength`): a string's bytes.
    pub fn value_length(&self) -> usize {
        // SAFETY: an open key.
        unsafe { required!(RedisModule_ValueLength)(self.as_ptr()) }
    }

    /// Its string's bytes, read in place (`RedisModule_StringDMA`, reading); `None` when it
    /// holds no string. Reading converts an integer-encoded value to a raw one (the same
    /// bytes).
    pub fn string_dma(&self) -> Option<&[u8]> {
        let mut len = 0;
        let mode = raw::REDISMODULE_READ as c_int;
        // SAFETY: an open key; the mode reads.
        let ptr = unsafe { required!(RedisModule_StringDMA)(self.as_ptr(), &mut len, mode) };
        // SAFETY: `len` readable bytes, valid until the key changes, which takes `&mut self`.
        (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }

    /// Its string's bytes, to write in place (`RedisModule_StringDMA`, writing); `None` when
    /// the key is not open for writing or holds no string.
    pub fn string_dma_mut(&mut self) -> Option<&mut [u8]> {
        let mut len = 0;
        let mode = raw::REDISMODULE_WRITE as c_int;
        // SAFETY: an open key (the server refuses a key not open for writing).
        let ptr = unsafe { required!(RedisModule_StringDMA)(self.as_ptr(), &mut len, mode) };
        // SAFETY: `len` writable bytes, valid until the key changes, which this borrow of
        // `self` prevents.
        (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) })
    }

    /// Grows or shrinks its string to `len` bytes (`RedisModule_StringTruncate`).
    pub fn string_truncate(&mut self, len: usize) -> bool {
        // SAFETY: an open key (the server refuses one not open for writing).
        unsafe { required!(RedisModule_StringTruncate)(self.as_ptr(), len) == OK }
    }

    /// Stores `value` as its string, replacing its value and expiry (`RedisModule_StringSet`);
    /// the server takes its own reference to `value`.
    pub fn string_set(&mut self, value: &OwnedString) -> bool {
        // SAFETY: an open key and a live string.
        unsafe { required!(RedisModule_StringSet)(self.as_ptr(), value.as_str().as_ptr()) == OK }
    }

    /// Sets its absolute expiry in milliseconds (`RedisModule_SetAbsExpire`).
    pub fn set_abs_expire(&mut self, at_millis: i64) -> bool {
        // SAFETY: an open key (the server refuses one without a value).
        unsafe { required!(RedisModule_SetAbsExpire)(self.as_ptr(), at_millis) == OK }
    }

    /// Deletes it (`RedisModule_DeleteKey`).
    pub fn delete(&mut self) -> bool {
        // SAFETY: an open key.
        unsafe { required!(RedisModule_DeleteKey)(self.as_ptr()) == OK }
    }

    /// The module type of its value (`RedisModule_ModuleTypeGetType`).
    pub fn module_type(&self) -> *mut raw::RedisModuleType {
        // SAFETY: an open key holding a module value (null otherwise).
        unsafe { required!(RedisModule_ModuleTypeGetType)(self.as_ptr()) }
    }

    /// Its module value (`RedisModule_ModuleTypeGetValue`): valid while the key is open and
    /// unchanged.
    pub fn module_value(&self) -> *mut c_void {
        // SAFETY: an open key holding a module value (null otherwise).
        unsafe { required!(RedisModule_ModuleTypeGetValue)(self.as_ptr()) }
    }

    /// Stores `value` as its value, of type `module_type` (`RedisModule_ModuleTypeSetValue`);
    /// on success the server owns it.
    ///
    /// # Safety
    /// `value` must be a value of `module_type` that the type's `free` callback can free, and
    /// on failure it is still the caller's.
    pub unsafe fn set_module_value(
        &mut self,
        module_type: *mut raw::RedisModuleType,
        value: *mut c_void,
    ) -> bool {
        // SAFETY: an open key; `value` per the caller.
        unsafe {
            required!(RedisModule_ModuleTypeSetValue)(self.as_ptr(), module_type, value) == OK
        }
    }

    /// Replaces its value by `value` of type `module_type`
    /// (`RedisModule_ModuleTypeReplaceValue`), without freeing the old one.
    ///
    /// # Safety
    /// As for [`KeyHandle::set_module_value`]; the old value must already be freed or still
    /// owned elsewhere, since the server lets go of it.
    pub unsafe fn replace_module_value(
        &mut self,
        module_type: *mut raw::RedisModuleType,
        value: *mut c_void,
    ) -> bool {
        let mut old = ptr::null_mut();
        // SAFETY: an open key; `value` per the caller; the old pointer is only written.
        unsafe {
            required!(RedisModule_ModuleTypeReplaceValue)(
                self.as_ptr(),
                module_type,
                value,
                &mut old,
            ) == OK
        }
    }
}

// --- Calls ----------------------------------------------------------------------------------

/// The context flags (`RedisModule_GetContextFlags`).
pub fn context_flags(ctx: Ctx<'_>) -> u32 {
    // SAFETY: a live context.
    unsafe { required!(RedisModule_GetContextFlags)(ctx.raw) as u32 }
}

/// Whether the call is the server asking where its keys are
/// (`RedisModule_IsKeysPositionRequest`).
pub fn is_keys_position_request(ctx: Ctx<'_>) -> bool {
    // SAFETY: a command's context.
    unsafe { required!(RedisModule_IsKeysPositionRequest)(ctx.raw) != 0 }
}

/// Tells the server argument `position` is a key, with key-spec `flags` where it takes them
/// (`RedisModule_KeyAtPosWithFlags`, 7.0+; `RedisModule_KeyAtPos` otherwise).
pub fn key_at_pos(ctx: Ctx<'_>, position: c_int, flags: u32) {
    // SAFETY: a command's context, during its keys-position request.
    unsafe {
        match optional!(RedisModule_KeyAtPosWithFlags) {
            Some(key_at) => key_at(ctx.raw, position, flags as c_int),
            None => required!(RedisModule_KeyAtPos)(ctx.raw, position),
        }
    }
}

/// Propagates the call itself, as it came (`RedisModule_ReplicateVerbatim`).
pub fn replicate_verbatim(ctx: Ctx<'_>) {
    // SAFETY: a command's context.
    unsafe { required!(RedisModule_ReplicateVerbatim)(ctx.raw) };
}

/// Propagates `command key args...` to replicas and the AOF (`RedisModule_Replicate`), with
/// at most three arguments after the key, each a string object the server takes a
/// reference to. One format per count: a vector (`v`) costs the server a reallocation.
pub fn replicate(ctx: Ctx<'_>, command: &CStr, key: ServerStr<'_>, args: &[ServerStr<'_>]) {
    let replicate = required!(RedisModule_Replicate);
    let (ctx, command, key) = (ctx.raw, command.as_ptr(), key.as_ptr());
    // SAFETY: a command's context, a C string, and live string objects, one per `s`.
    unsafe {
        match *args {
            [] => replicate(ctx, command, c"s".as_ptr(), key),
            [a] => replicate(ctx, command, c"ss".as_ptr(), key, a.as_ptr()),
            [a, b] => replicate(ctx, command, c"sss".as_ptr(), key, a.as_ptr(), b.as_ptr()),
            [a, b, c, ..] => replicate(
                ctx,
                command,
                c"ssss".as_ptr(),
                key,
                a.as_ptr(),
                b.as_ptr(),
                c.as_ptr(),
            ),
        };
    }
}

/// Tells `WATCH` and client tracking that `key` changed (`RedisModule_SignalModifiedKey`).
pub fn signal_modified_key(ctx: Ctx<'_>, key: ServerStr<'_>) {
    // SAFETY: a command's context and a live string.
    unsafe { required!(RedisModule_SignalModifiedKey)(ctx.raw, key.as_ptr()) };
}

/// The keyspace-event classes of this module's writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventClass {
    /// `$`: a string.
    String,
    /// `d`: a module type.
    Module,
}

/// Fires the keyspace event `event` of `class` for `key` (`RedisModule_NotifyKeyspaceEvent`).
pub fn notify_keyspace_event(ctx: Ctx<'_>, class: EventClass, event: &CStr, key: ServerStr<'_>) {
    let class = match class {
        EventClass::String => raw::REDISMODULE_NOTIFY_STRING,
        EventClass::Module => raw::REDISMODULE_NOTIFY_MODULE,
    };
    // SAFETY: a command's context, a C string and a live string.
    unsafe {
        required!(RedisModule_NotifyKeyspaceEvent)(
            ctx.raw,
            class as c_int,
            event.as_ptr(),
            key.as_ptr(),
        )
    };
}

/// Starts an array reply of `len` elements (`RedisModule_ReplyWithArray`).
pub fn reply_with_array(ctx: Ctx<'_>, len: usize) {
    // SAFETY: a command's context.
    unsafe { required!(RedisModule_ReplyWithArray)(ctx.raw, len as _) };
}

/// Replies with an integer (`RedisModule_ReplyWithLongLong`).
pub fn reply_with_long_long(ctx: Ctx<'_>, value: i64) {
    // SAFETY: a command's context.
    unsafe { required!(RedisModule_ReplyWithLongLong)(ctx.raw, value) };
}

/// Replies with an error, its text starting with its code (`RedisModule_ReplyWithError`).
pub fn reply_with_error(ctx: Ctx<'_>, message: &CStr) {
    // SAFETY: a command's context and a C string.
    unsafe { required!(RedisModule_ReplyWithError)(ctx.raw, message.as_ptr()) };
}

/// Replies with the server's own wrong-arity error (`RedisModule_WrongArity`).
pub fn wrong_arity(ctx: Ctx<'_>) {
    // SAFETY: a command's context.
    unsafe { required!(RedisModule_WrongArity)(ctx.raw) };
}

/// Replies with a simple string (`RedisModule_ReplyWithSimpleString`).
pub fn reply_with_simple_string(ctx: Ctx<'_>, text: &CStr) {
    // SAFETY: a command's context and a C string.
    unsafe { required!(RedisModule_ReplyWithSimpleString)(ctx.raw, text.as_ptr()) };
}

/// Replies with a bulk string of `bytes` (`RedisModule_ReplyWithStringBuffer`).
pub fn reply_with_string_buffer(ctx: Ctx<'_>, bytes: &[u8]) {
    // SAFETY: a command's context; the server copies the bytes.
    unsafe {
        required!(RedisModule_ReplyWithStringBuffer)(ctx.raw, bytes.as_ptr().cast(), bytes.len())
    };
}

/// The command's cached time in microseconds, constant through a command, a `MULTI`/`EXEC`
/// or a script (`RedisModule_CachedMicroseconds`, Redis 7.2+ and Valkey); `None` before.
pub fn cached_microseconds() -> Option<i64> {
    // SAFETY: it only reads the server's clock.
    optional!(RedisModule_CachedMicroseconds).map(|cached| unsafe { cached() })
}

/// The used memory over `maxmemory` (`RedisModule_GetUsedMemoryRatio`); 1.0 where the server
/// cannot say, the safe side.
pub fn used_memory_ratio() -> f32 {
    // SAFETY: it only reads the server's memory counters.
    optional!(RedisModule_GetUsedMemoryRatio).map_or(1.0, |ratio| unsafe { ratio() })
}

/// Fills `bytes` from the server's random generator (`RedisModule_GetRandomBytes`: SHA-256
/// in counter mode over a seed from `/dev/urandom`).
pub fn random_bytes(bytes: &mut [u8]) {
    // SAFETY: `bytes.len()` writable bytes.
    unsafe { required!(RedisModule_GetRandomBytes)(bytes.as_mut_ptr(), bytes.len()) };
}

/// Logs `message` at `level` (`warning`, `notice`, ...) as data, never as a format string
/// (`RedisModule_Log`); with no context, under no module's name. Allocates nothing, so it
/// may run before the API is ready (then it logs nothing).
pub fn log(ctx: Option<Ctx<'_>>, level: &CStr, message: &CStr) {
    let ctx = ctx.map_or(ptr::null_mut(), |ctx| ctx.raw);
    if let Some(log) = optional!(RedisModule_Log) {
        // SAFETY: a live or null context; the message goes as data to a "%s" format.
        unsafe { log(ctx, level.as_ptr(), c"%s".as_ptr(), message.as_ptr()) };
    }
}

/// The user running a call, as ACL sees it: freed when dropped.
pub struct CallerUser {
    /// The user's name, kept until the user is freed.
    _name: OwnedString,
    user: NonNull<raw::RedisModuleUser>,
}

impl CallerUser {
    /// The user of the running call (`RedisModule_GetCurrentUserName`,
    /// `RedisModule_GetModuleUserFromUserName`); `None` where the server cannot say (a
    /// replicated or loaded call, a server without the API).
    pub fn of(ctx: Ctx<'_>) -> Option<CallerUser> {
        let current = optional!(RedisModule_GetCurrentUserName)?;
        let from_name = optional!(RedisModule_GetModuleUserFromUserName)?;
        optional!(RedisModule_ACLCheckCommandPermissions)?;
        optional!(RedisModule_FreeModuleUser)?;
        // SAFETY: a command's context; the name is a new string the module owns.
        let name = NonNull::new(unsafe { current(ctx.raw) })?;
        let name = OwnedString { raw: name };
        // SAFETY: a live string; the user is the module's until freed.
        let user = NonNull::new(unsafe { from_name(name.raw.as_ptr()) })?;
        Some(CallerUser { _name: name, user })
    }

    /// Whether ACL lets this user run `argv` (a command and its arguments), as the server
    /// would check it (`RedisModule_ACLCheckCommandPermissions`).
    pub fn may_run(&self, argv: &[&[u8]]) -> bool {
        let Some(check) = optional!(RedisModule_ACLCheckCommandPermissions) else {
            return false;
        };
        let strings: Vec<OwnedString> = argv.iter().map(|arg| OwnedString::new(arg)).collect();
        let mut raw: Vec<*mut raw::RedisModuleString> =
            strings.iter().map(|string| string.raw.as_ptr()).collect();
        // SAFETY: a live user and `argc` live strings, read during the call.
        unsafe { check(self.user.as_ptr(), raw.as_mut_ptr(), raw.len() as c_int) == OK }
    }
}

impl Drop for CallerUser {
    fn drop(&mut self) {
        if let Some(free) = optional!(RedisModule_FreeModuleUser) {
            // SAFETY: the user made by `of`, freed once.
            unsafe { free(self.user.as_ptr()) };
        }
    }
}

// --- Loading: commands, the data type, events, configs -------------------------------------

/// A command callback, as the server calls it.
pub type CommandFunc = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// Creates the command `name` (`RedisModule_CreateCommand`), its keys at `first`, `last`,
/// `step` (0, 0, 0 for none or found per call).
pub fn create_command(
    ctx: Ctx<'_>,
    name: &CStr,
    handler: CommandFunc,
    flags: &CStr,
    (first, last, step): (c_int, c_int, c_int),
) -> bool {
    // SAFETY: OnLoad's context and static C strings.
    unsafe {
        required!(RedisModule_CreateCommand)(
            ctx.raw,
            name.as_ptr(),
            Some(handler),
            flags.as_ptr(),
            first,
            last,
            step,
        ) == OK
    }
}

/// A registered command, to describe (7.0+).
#[derive(Clone, Copy)]
pub struct CommandHandle<'a> {
    raw: NonNull<raw::RedisModuleCommand>,
    _ctx: PhantomData<Ctx<'a>>,
}

/// The command `name` this module registered (`RedisModule_GetCommand`); `None` on servers
/// that cannot describe commands (before 7.0) or when it is not found.
pub fn get_command<'a>(ctx: Ctx<'a>, name: &CStr) -> Option<CommandHandle<'a>> {
    // SAFETY: OnLoad's context and a C string.
    let raw = optional!(RedisModule_GetCommand).map(|get| unsafe { get(ctx.raw, name.as_ptr()) });
    NonNull::new(raw.unwrap_or(ptr::null_mut())).map(|raw| CommandHandle {
        raw,
        _ctx: PhantomData,
    })
}

/// Whether the server can describe commands (`RedisModule_SetCommandInfo`, 7.0+).
pub fn can_describe_commands() -> bool {
    optional!(RedisModule_GetCommand).is_some() && optional!(RedisModule_SetCommandInfo).is_some()
}

/// Gives `command` its metadata (`RedisModule_SetCommandInfo`); `false` if the server
/// refuses or cannot.
///
/// # Safety
/// Every pointer in `info` must be valid (terminated arrays, C strings) for the call; the
/// server copies what it keeps.
pub unsafe fn set_command_info(command: CommandHandle<'_>, info: &CommandInfo) -> bool {
    // SAFETY: a registered command; `info` per the caller.
    optional!(RedisModule_SetCommandInfo)
        .is_some_and(|set| unsafe { set(command.raw.as_ptr(), info) } == OK)
}

/// Puts `command` in the ACL `categories` (`RedisModule_SetCommandACLCategories`, 7.2+):
/// `None` where the server has no categories for module commands.
pub fn set_command_acl_categories(command: CommandHandle<'_>, categories: &CStr) -> Option<bool> {
    // SAFETY: a registered command and a C string the server parses before returning.
    optional!(RedisModule_SetCommandACLCategories)
        .map(|set| unsafe { set(command.raw.as_ptr(), categories.as_ptr()) } == OK)
}

/// Adds the ACL category `name` (`RedisModule_AddACLCategory`, 7.4+); `false` where the
/// server cannot or refuses.
pub fn add_acl_category(ctx: Ctx<'_>, name: &CStr) -> bool {
    // SAFETY: OnLoad's context and a C string it copies.
    optional!(RedisModule_AddACLCategory)
        .is_some_and(|add| unsafe { add(ctx.raw, name.as_ptr()) } == OK)
}

/// Sets the module's options (`RedisModule_SetModuleOptions`).
pub fn set_module_options(ctx: Ctx<'_>, options: u32) {
    // SAFETY: OnLoad's context.
    unsafe { required!(RedisModule_SetModuleOptions)(ctx.raw, options as c_int) };
}

/// Creates the data type `name` (`RedisModule_CreateDataType`); `None` if refused.
pub fn create_data_type(
    ctx: Ctx<'_>,
    name: &CStr,
    encoding_version: c_int,
    methods: &mut TypeMethods,
) -> Option<NonNull<raw::RedisModuleType>> {
    // SAFETY: OnLoad's context; the server copies the name and the methods.
    NonNull::new(unsafe {
        required!(RedisModule_CreateDataType)(ctx.raw, name.as_ptr(), encoding_version, methods)
    })
}

/// Whether the server can defragment module values (`RedisModule_DefragAlloc`).
pub fn can_defrag() -> bool {
    optional!(RedisModule_DefragAlloc).is_some()
}

/// A server-event callback.
pub type EventCallback =
    unsafe extern "C" fn(*mut raw::RedisModuleCtx, ServerEvent, u64, *mut c_void);

/// Subscribes `callback` to the server event `id` (`RedisModule_SubscribeToServerEvent`);
/// `false` where the server cannot or refuses.
pub fn subscribe_to_server_event(ctx: Ctx<'_>, id: u64, callback: EventCallback) -> bool {
    let event = ServerEvent { id, dataver: 1 };
    // SAFETY: OnLoad's context; the callback matches the API's signature.
    optional!(RedisModule_SubscribeToServerEvent)
        .is_some_and(|subscribe| unsafe { subscribe(ctx.raw, event, Some(callback)) } == OK)
}

/// An `INFO` callback.
pub type InfoFunc = unsafe extern "C" fn(*mut raw::RedisModuleInfoCtx, c_int);

/// Registers the module's `INFO` sections (`RedisModule_RegisterInfoFunc`).
pub fn register_info_func(ctx: Ctx<'_>, callback: InfoFunc) -> bool {
    // SAFETY: OnLoad's context; the callback matches the API's signature.
    optional!(RedisModule_RegisterInfoFunc)
        .is_some_and(|register| unsafe { register(ctx.raw, Some(callback)) } == OK)
}

/// A command filter callback.
pub type FilterFunc = unsafe extern "C" fn(*mut raw::RedisModuleCommandFilterCtx);

/// Registers a command filter that sees every command but the module's own
/// (`RedisModule_RegisterCommandFilter`); `false` where the server cannot filter.
pub fn register_command_filter(ctx: Ctx<'_>, callback: FilterFunc) -> bool {
    let flags = raw::REDISMODULE_CMDFILTER_NOSELF as c_int;
    // SAFETY: OnLoad's context; the callback matches the API's signature.
    let filter = optional!(RedisModule_RegisterCommandFilter)
        .map_or(ptr::null_mut(), |register| unsafe {
            register(ctx.raw, Some(callback), flags)
        });
    !filter.is_null()
        && optional!(RedisModule_CommandFilterArgGet).is_some()
        && optional!(RedisModule_CommandFilterArgsCount).is_some()
}

/// A numeric config's getter and setter.
pub type ConfigGet = unsafe extern "C" fn(*const c_char, *mut c_void) -> c_longlong;
/// See [`ConfigGet`].
pub type ConfigSet = unsafe extern "C" fn(
    *const c_char,
    c_longlong,
    *mut c_void,
    *mut *mut raw::RedisModuleString,
) -> c_int;

/// Registers the numeric config `name` from `min` to `max` with its callbacks
/// (`RedisModule_RegisterNumericConfig`) and loads the server's value for it
/// (`RedisModule_LoadConfigs`). `None` on servers without module configs.
pub fn register_numeric_config(
    ctx: Ctx<'_>,
    name: &CStr,
    default: i64,
    (min, max): (i64, i64),
    (get, set): (ConfigGet, ConfigSet),
) -> Option<Result<(), &'static str>> {
    let (register, load) = (
        optional!(RedisModule_RegisterNumericConfig)?,
        optional!(RedisModule_LoadConfigs)?,
    );
    // SAFETY: OnLoad's context; a static C string; the callbacks match the API's signatures
    // and use no private data.
    let registered = unsafe {
        register(
            ctx.raw,
            name.as_ptr(),
            default,
            raw::REDISMODULE_CONFIG_DEFAULT as c_uint,
            min,
            max,
            Some(get),
            Some(set),
            None,
            ptr::null_mut(),
        )
    };
    if registered != OK {
        return Some(Err("refused"));
    }
    // SAFETY: OnLoad's context, after the module's configs are registered.
    if unsafe { load(ctx.raw) } != OK {
        return Some(Err("not loaded"));
    }
    Some(Ok(()))
}

/// One section of `INFO`, read by the module (`RedisModule_GetServerInfo`); freed when
/// dropped.
pub struct ServerInfo<'a> {
    ctx: Ctx<'a>,
    raw: NonNull<raw::RedisModuleServerInfoData>,
}

impl<'a> ServerInfo<'a> {
    /// The section `section` of `INFO`; `None` where the server cannot say.
    pub fn read(ctx: Ctx<'a>, section: &CStr) -> Option<ServerInfo<'a>> {
        let get = optional!(RedisModule_GetServerInfo)?;
        optional!(RedisModule_FreeServerInfo)?;
        // SAFETY: a live context and a C string.
        let raw = NonNull::new(unsafe { get(ctx.raw, section.as_ptr()) })?;
        Some(ServerInfo { ctx, raw })
    }

    /// A field as text (`RedisModule_ServerInfoGetFieldC`).
    pub fn text(&self, field: &CStr) -> Option<Vec<u8>> {
        let text = optional!(RedisModule_ServerInfoGetFieldC)?;
        // SAFETY: a live section and a C string; the text lives as long as the section, and
        // is copied before it goes.
        unsafe {
            let value = text(self.raw.as_ptr(), field.as_ptr());
            (!value.is_null()).then(|| CStr::from_ptr(value).to_bytes().to_vec())
        }
    }

    /// A field as a signed integer (`RedisModule_ServerInfoGetFieldSigned`).
    pub fn signed(&self, field: &CStr) -> Option<i64> {
        let signed = optional!(RedisModule_ServerInfoGetFieldSigned)?;
        let mut error = 0;
        // SAFETY: a live section and a C string.
        let value = unsafe { signed(self.raw.as_ptr(), field.as_ptr(), &mut error) };
        (error == 0).then_some(value)
    }

    /// A field as an unsigned integer (`RedisModule_ServerInfoGetFieldUnsigned`).
    pub fn unsigned(&self, field: &CStr) -> Option<u64> {
        let unsigned = optional!(RedisModule_ServerInfoGetFieldUnsigned)?;
        let mut error = 0;
        // SAFETY: a live section and a C string.
        let value = unsafe { unsigned(self.raw.as_ptr(), field.as_ptr(), &mut error) };
        (error == 0).then_some(value)
    }
}

impl Drop for ServerInfo<'_> {
    fn drop(&mut self) {
        if let Some(free) = optional!(RedisModule_FreeServerInfo) {
            // SAFETY: read with this context, freed once.
            unsafe { free(self.ctx.raw, self.raw.as_ptr()) };
        }
    }
}

// --- Callbacks' contexts ------------------------------------------------------------------

/// Declares a handle over a context the server passes to one kind of callback.
macro_rules! callback_context {
    ($(#[$doc:meta])* $name:ident, $raw:ty) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'a> {
            raw: NonNull<$raw>,
            _callback: PhantomData<&'a $raw>,
        }

        impl $name<'_> {
            /// The context the server passed to the running callback; `None` if null.
            ///
            /// # Safety
            /// `raw` must be the server's context for the running callback, not used after
            /// it returns.
            pub unsafe fn from_raw(raw: *mut $raw) -> Option<Self> {
                NonNull::new(raw).map(|raw| $name {
                    raw,
                    _callback: PhantomData,
                })
            }

            fn as_ptr(self) -> *mut $raw {
                self.raw.as_ptr()
            }
        }
    };
}

callback_context!(
    /// An RDB or AOF-rewrite context (`rdb_load`, `rdb_save`, `aof_rewrite`).
    Io,
    raw::RedisModuleIO
);
callback_context!(
    /// A `DEBUG DIGEST-VALUE` context.
    Digest,
    raw::RedisModuleDigest
);
callback_context!(
    /// An `INFO` callback's context.
    InfoCtx,
    raw::RedisModuleInfoCtx
);
callback_context!(
    /// A command filter's context.
    FilterCtx,
    raw::RedisModuleCommandFilterCtx
);
callback_context!(
    /// Active defragmentation's context.
    DefragCtx,
    raw::RedisModuleDefragCtx
);

/// Writes an unsigned integer to the RDB (`RedisModule_SaveUnsigned`).
pub fn save_unsigned(io: Io<'_>, value: u64) {
    // SAFETY: a saving context.
    unsafe { required!(RedisModule_SaveUnsigned)(io.as_ptr(), value) };
}

/// Writes `bytes` to the RDB as one string (`RedisModule_SaveStringBuffer`).
pub fn save_string_buffer(io: Io<'_>, bytes: &[u8]) {
    // SAFETY: a saving context; the server copies the bytes.
    unsafe {
        required!(RedisModule_SaveStringBuffer)(io.as_ptr(), bytes.as_ptr().cast(), bytes.len())
    };
}

/// Reads an unsigned integer from the RDB (`RedisModule_LoadUnsigned`); check
/// [`is_io_error`] before trusting it.
pub fn load_unsigned(io: Io<'_>) -> u64 {
    // SAFETY: a loading context.
    unsafe { required!(RedisModule_LoadUnsigned)(io.as_ptr()) }
}

/// A buffer the server allocated for the module, freed when dropped.
pub struct ServerBuffer {
    raw: NonNull<c_char>,
    len: usize,
}

impl ServerBuffer {
    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes the server allocated and the module owns.
        unsafe { std::slice::from_raw_parts(self.raw.as_ptr().cast(), self.len) }
    }
}

impl Drop for ServerBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by the server for the module, freed once.
        unsafe { required!(RedisModule_Free)(self.raw.as_ptr().cast()) };
    }
}

/// Reads one string from the RDB (`RedisModule_LoadStringBuffer`); `None` on a read error,
/// in which case any buffer the server gave is freed.
pub fn load_string_buffer(io: Io<'_>) -> Option<ServerBuffer> {
    let mut len = 0;
    // SAFETY: a loading context.
    let raw = unsafe { required!(RedisModule_LoadStringBuffer)(io.as_ptr(), &mut len) };
    let buffer = NonNull::new(raw).map(|raw| ServerBuffer { raw, len });
    if is_io_error(io) {
        return None; // The buffer, if any, is freed here.
    }
    buffer
}

/// Whether reading the RDB failed (`RedisModule_IsIOError`).
pub fn is_io_error(io: Io<'_>) -> bool {
    // SAFETY: a loading context.
    unsafe { required!(RedisModule_IsIOError)(io.as_ptr()) != 0 }
}

/// Writes `command key args...` to an AOF being rewritten (`RedisModule_EmitAOF`), with at
/// most three arguments after the key; the server copies them.
pub fn emit_aof(io: Io<'_>, command: &CStr, key: ServerStr<'_>, args: &[ServerStr<'_>]) {
    let emit = required!(RedisModule_EmitAOF);
    let (io, command, key) = (io.as_ptr(), command.as_ptr(), key.as_ptr());
    // SAFETY: a rewriting context, a C string and live string objects, one per `s` (the
    // key, which the server may keep on its stack, through `s`, which copies such a key).
    unsafe {
        match *args {
            [] => emit(io, command, c"s".as_ptr(), key),
            [a] => emit(io, command, c"ss".as_ptr(), key, a.as_ptr()),
            [a, b] => emit(io, command, c"sss".as_ptr(), key, a.as_ptr(), b.as_ptr()),
            [a, b, c, ..] => emit(
                io,
                command,
                c"ssss".as_ptr(),
                key,
                a.as_ptr(),
                b.as_ptr(),
                c.as_ptr(),
            ),
        };
    }
}

/// Adds `bytes` to a value's digest (`RedisModule_DigestAddStringBuffer`).
pub fn digest_add_string_buffer(digest: Digest<'_>, bytes: &[u8]) {
    // SAFETY: a digest context; the server reads the bytes before returning.
    unsafe {
        required!(RedisModule_DigestAddStringBuffer)(
            digest.as_ptr(),
            bytes.as_ptr().cast(),
            bytes.len(),
        )
    };
}

/// Ends a sequence in a value's digest (`RedisModule_DigestEndSequence`).
pub fn digest_end_sequence(digest: Digest<'_>) {
    // SAFETY: a digest context.
    unsafe { required!(RedisModule_DigestEndSequence)(digest.as_ptr()) };
}

/// Adds a section to `INFO` (`RedisModule_InfoAddSection`).
pub fn info_add_section(info: InfoCtx<'_>, name: &CStr) {
    if let Some(add) = optional!(RedisModule_InfoAddSection) {
        // SAFETY: an INFO context and a C string.
        unsafe { add(info.as_ptr(), name.as_ptr()) };
    }
}

/// Starts a field whose value is a dictionary (`RedisModule_InfoBeginDictField`).
pub fn info_begin_dict_field(info: InfoCtx<'_>, name: &CStr) {
    if let Some(begin) = optional!(RedisModule_InfoBeginDictField) {
        // SAFETY: an INFO context and a C string.
        unsafe { begin(info.as_ptr(), name.as_ptr()) };
    }
}

/// Adds an unsigned integer field (`RedisModule_InfoAddFieldULongLong`).
pub fn info_add_field_ulonglong(info: InfoCtx<'_>, name: &CStr, value: u64) {
    if let Some(add) = optional!(RedisModule_InfoAddFieldULongLong) {
        // SAFETY: an INFO context and a C string.
        unsafe { add(info.as_ptr(), name.as_ptr(), value) };
    }
}

/// Ends a dictionary field (`RedisModule_InfoEndDictField`).
pub fn info_end_dict_field(info: InfoCtx<'_>) {
    if let Some(end) = optional!(RedisModule_InfoEndDictField) {
        // SAFETY: an INFO context.
        unsafe { end(info.as_ptr()) };
    }
}

/// How many arguments the filtered command has, its name included
/// (`RedisModule_CommandFilterArgsCount`).
pub fn filter_args_count(filter: FilterCtx<'_>) -> usize {
    optional!(RedisModule_CommandFilterArgsCount).map_or(0, |count| {
        // SAFETY: a filter's context.
        let count = unsafe { count(filter.as_ptr()) };
        usize::try_from(count).unwrap_or(0)
    })
}

/// Argument `position` of the filtered command (`RedisModule_CommandFilterArgGet`).
pub fn filter_arg_get<'a>(filter: FilterCtx<'a>, position: usize) -> Option<ServerStr<'a>> {
    let get = optional!(RedisModule_CommandFilterArgGet)?;
    // SAFETY: a filter's context; the argument lives while the filter runs.
    unsafe { ServerStr::from_raw(get(filter.as_ptr(), position as c_int)) }
}

/// Moves `value` to a less fragmented allocation (`RedisModule_DefragAlloc`); `None` when
/// it stays where it is.
///
/// # Safety
/// `value` must be an allocation of the server's allocator that the caller replaces by the
/// one returned (the old one is freed).
pub unsafe fn defrag_alloc(defrag: DefragCtx<'_>, value: *mut c_void) -> Option<*mut c_void> {
    let alloc = optional!(RedisModule_DefragAlloc)?;
    // SAFETY: a defrag context; `value` per the caller.
    let moved = unsafe { alloc(defrag.as_ptr(), value) };
    (!moved.is_null()).then_some(moved)
}
