//! Working memory kept from one command call to the next, without thread-local storage.
//!
//! Redis runs module commands one at a time: on the main thread, or on another thread only
//! while it holds the global lock. A `static` is then as private to a call as a thread-local
//! would be, and reaching it costs a plain address instead of a `__tls_get_addr` call and a
//! lazy-initialisation check on every call of a shared library.

use std::cell::{Cell, UnsafeCell};

/// A value only command calls use, one call at a time.
pub struct Reused<T> {
    in_use: Cell<bool>,
    value: UnsafeCell<T>,
}

// SAFETY: Redis serialises command calls (main thread, or the global lock), and `with`
// refuses nested use, so no two `&mut T` ever exist at once; a command may run on another
// thread than the last (holding the lock), so the value must be one that may move between
// threads (`T: Send`).
unsafe impl<T: Send> Sync for Reused<T> {}

impl<T> Reused<T> {
    /// Holds `value`.
    pub const fn new(value: T) -> Self {
        Reused {
            in_use: Cell::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Runs `use_value` with the value. Panics (caught before Redis by the command
    /// handler) if called again from inside `use_value`.
    #[inline(always)]
    pub fn with<R>(&self, use_value: impl FnOnce(&mut T) -> R) -> R {
        assert!(!self.in_use.replace(true), "command-local value in use");
        /// Gives the value back when the use ends, even by a panic.
        struct Release<'a>(&'a Cell<bool>);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _release = Release(&self.in_use);
        // SAFETY: `in_use` was false: this is the only reference (see the `Sync` impl).
        use_value(unsafe { &mut *self.value.get() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_is_kept_between_uses_and_nested_use_is_refused() {
        static COUNTER: Reused<u32> = Reused::new(0);
        COUNTER.with(|count| *count += 1);
        assert_eq!(COUNTER.with(|count| *count), 1);
        let nested = std::panic::catch_unwind(|| COUNTER.with(|_| COUNTER.with(|_| ())));
        assert!(nested.is_err());
        assert_eq!(COUNTER.with(|count| *count), 1, "released after the panic");
    }
}
