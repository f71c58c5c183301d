//! A string object the module owns: what a key's new value is stored as, and what its
//! effect can send without a copy.

use redis_module::raw;

/// A string object the module owns, freed when dropped.
pub struct OwnedString {
    ctx: *mut raw::RedisModuleCtx,
    string: *mut raw::RedisModuleString,
}

impl OwnedString {
    /// Takes ownership of `string`, created in `ctx`.
    ///
    /// # Safety
    /// `string` must be a live string object the module created in `ctx` and owns one
    /// reference to, which no one else frees.
    pub unsafe fn new(
        ctx: *mut raw::RedisModuleCtx,
        string: *mut raw::RedisModuleString,
    ) -> OwnedString {
        OwnedString { ctx, string }
    }

    /// The string object, for the FFI layer's calls.
    pub(crate) fn as_ptr(&self) -> *mut raw::RedisModuleString {
        self.string
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        // SAFETY: a string this module created in this context, freed once; copies the
        // server made (a stored value, a propagated argument) hold references of their own.
        unsafe { raw::RedisModule_FreeString.unwrap()(self.ctx, self.string) };
    }
}
