//! Where the engine's keys live: a [`Store`] of open [`Key`]s, the server's keys
//! (`crate::redis::store`) or a map in the tests ([`super::memory`]).

use std::ops::Deref;

use crate::core::codec::Placement;
use crate::core::effect::Effect;
use crate::core::ring::Native;
use crate::core::time::Millis;
use crate::core::windows::StateError;

/// Where a call's limiters keep their state: a key per limiter, in the call's order.
pub trait Store {
    /// Why opening, reading or writing a key fails; a key that holds something else than
    /// the limiter's state is one of them.
    type Error: From<StateError>;
    /// An open key.
    type Key<'s>: Key<Error = Self::Error>
    where
        Self: 's;

    /// Opens the key of limiter `index`: for writing when `write`.
    fn open(&self, index: usize, write: bool) -> Result<Self::Key<'_>, Self::Error>;
}

/// One open key: its state read, and a write that also reaches replicas and the AOF.
pub trait Key {
    /// As [`Store::Error`].
    type Error: From<StateError>;
    /// A native value read in place.
    type View<'k, T: Native + 'k>: Deref<Target = T>
    where
        Self: 'k;

    /// The key's string: `None` when the key does not exist, its bytes when it is a string
    /// whose length `accepts` takes, `WRONGTYPE` for anything else (the length is checked
    /// before the bytes are read).
    fn string(&self, accepts: impl Fn(usize) -> bool) -> Result<Option<&[u8]>, Self::Error>;

    /// The key's native value of kind `T`: `None` when the key does not exist, `WRONGTYPE`
    /// for anything else.
    fn native<T: Native>(&self) -> Result<Option<Self::View<'_, T>>, Self::Error>;

    /// Stores a string state (the bytes from `placement.at` on, over the value the decision
    /// read), expiring at `expire_at`.
    fn put_string(
        &mut self,
        value: &[u8],
        placement: Placement,
        expire_at: Millis,
    ) -> Result<(), Self::Error>;

    /// Stores a whole string value with no expiry (a load state holding a policy).
    fn put_persistent(&mut self, value: &[u8]) -> Result<(), Self::Error>;

    /// Deletes the key.
    fn delete(&mut self) -> Result<(), Self::Error>;

    /// Changes the key's native value of kind `T` in place (a new, empty one when the key
    /// does not exist and `create` says so; else `change` does not run and the reply is
    /// `None`). When the change says it changed something, `effect` gives what replicas and
    /// the AOF receive; it runs only when something may receive it.
    fn change_native<'e, T: Native + Default, R>(
        &mut self,
        create: bool,
        change: impl FnOnce(&mut T) -> NativeChange<R>,
        effect: impl FnOnce(&R) -> Effect<'e>,
    ) -> Result<Option<R>, Self::Error>;
}

/// What a change to a native value did.
pub struct NativeChange<R> {
    /// What the caller gets back.
    pub reply: R,
    /// Whether anything changed (when nothing did, nothing is stored, signalled or
    /// propagated).
    pub changed: bool,
    /// What becomes of the key.
    pub after: After,
}

/// What becomes of a key after a change to its native value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    /// It expires then.
    ExpiresAt(Millis),
    /// It keeps the expiry it has (none for a key just made).
    KeepsItsExpiry,
    /// It goes: nothing in it counts any more.
    Goes,
}

impl After {
    /// A key that expires at `expire_at`, or goes when `None`.
    pub fn expiring(expire_at: Option<Millis>) -> After {
        expire_at.map_or(After::Goes, After::ExpiresAt)
    }
}
