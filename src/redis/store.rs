//! The server's keys as the engine's [`Store`]: each limiter's key opened through the key
//! API ([`super::key`]), its state read and written in place, every write signalled to
//! `WATCH` and keyspace-event subscribers and sent to replicas and the AOF as its effect
//! ([`super::effects`]), or, when nothing would receive it, only counted.
//!
//! Nothing here knows which limiter a key serves: the engine says what to read and write.

use crate::core::codec::Placement;
use crate::core::effect::{self, Effect};
use crate::core::engine::{self, After, Call, Key, NativeChange, Settled, Store, Working};
use crate::core::ring::Native;
use crate::core::time::Millis;
use crate::core::verdict::Verdict;
use crate::core::windows::StateError;
use crate::error::CommandError;
use crate::redis::api::OwnedString;
use crate::redis::call::Invocation;
use crate::redis::key::{EventClass, Held, OpenKey};
use crate::redis::native_type::View;
use crate::redis::replicate;
use crate::redis::reused::Reused;
use crate::redis::{receivers, settings};

/// The engine's working memory: commands run one at a time, so one set, kept warm, serves
/// every call without allocating.
static WORKING: Reused<Working> = Reused::new(Working::new());

/// Runs `call` on the keys of `invocation` from argument `first_key` on (one per limiter,
/// at most `N`), writing each limiter's reply to `verdicts`.
pub fn decide_on_keys<const N: usize>(
    invocation: &Invocation,
    first_key: usize,
    call: &Call,
    verdicts: &mut [Verdict],
) -> Result<Settled, CommandError> {
    let store = RedisStore {
        call: invocation,
        first_key,
        verbatim: false,
    };
    WORKING.with(|working| engine::decide_and_commit::<_, N>(&store, call, working, verdicts))
}

/// Runs `call` as [`decide_on_keys`] does, for the internal command that carries a call again
/// (`RL.LOG.REPLAY`, from releases before 0.3): what it changes propagates as it came.
pub fn replay(
    invocation: &Invocation,
    call: &Call,
    verdicts: &mut [Verdict],
) -> Result<Settled, CommandError> {
    let store = RedisStore {
        call: invocation,
        first_key: 1,
        verbatim: true,
    };
    WORKING.with(|working| engine::decide_and_commit::<_, 1>(&store, call, working, verdicts))
}

/// The keys of one call.
pub struct RedisStore<'c> {
    call: &'c Invocation<'c>,
    /// The argument of the first limiter's key; the others follow it.
    first_key: usize,
    /// Whether native changes propagate as the call came instead of as their effects.
    verbatim: bool,
}

impl<'c> RedisStore<'c> {
    /// The call's key at argument `index`, for a command that changes one key itself (the
    /// leases, the AOF's chunks).
    pub fn single(call: &'c Invocation<'c>, verbatim: bool) -> RedisStore<'c> {
        RedisStore {
            call,
            first_key: 1,
            verbatim,
        }
    }
}

impl From<StateError> for CommandError {
    fn from(error: StateError) -> CommandError {
        match error {
            StateError::Foreign => CommandError::WRONG_TYPE,
            StateError::OtherAlgorithm => CommandError::Message(
                c"WRONGTYPE the key holds the state of another RL.WINDOW algorithm",
            ),
        }
    }
}

impl Store for RedisStore<'_> {
    type Error = CommandError;
    type Key<'s>
        = LimiterKey<'s>
    where
        Self: 's;

    fn open(&self, index: usize, write: bool) -> Result<LimiterKey<'_>, CommandError> {
        let effects = if write { writable(self.call)? } else { false };
        let name = self.call.key(self.first_key + index);
        let key = OpenKey::open(self.call, name, write).ok_or(CommandError::KEY_BUSY)?;
        Ok(LimiterKey {
            call: self.call,
            key,
            effects,
            verbatim: self.verbatim,
        })
    }
}

/// Whether `call` may write: the server's `OOM` error when a client's call runs over
/// `maxmemory`; otherwise whether its writes must build their effects.
///
/// When the server's settings are followed ([`settings`]), or replication has been seen,
/// whether effects are needed is known without the context flags, and they are read only
/// near `maxmemory`: the used-memory ratio is at least 1 whenever the server counts itself
/// out of memory (the same used memory over the same limit), and without a limit nothing
/// is asked at all.
fn writable(call: &Invocation) -> Result<bool, CommandError> {
    let Some(effects) = receivers::effects_known() else {
        let flags = call.context_flags();
        if flags.out_of_memory() {
            return Err(CommandError::OUT_OF_MEMORY);
        }
        return Ok(flags.effects_needed() || receivers::replication_seen());
    };
    if settings::maxmemory_set()
        && settings::used_memory_ratio() >= 1.0
        && call.context_flags().out_of_memory()
    {
        return Err(CommandError::OUT_OF_MEMORY);
    }
    Ok(effects)
}

/// An open key holding (or about to hold) a limiter's state.
pub struct LimiterKey<'c> {
    call: &'c Invocation<'c>,
    key: OpenKey<'c>,
    /// Whether a write must build its effect: an AOF or a replica may receive it (see
    /// [`receivers`]); false when opened for reading.
    effects: bool,
    /// Whether native changes propagate as the call came.
    verbatim: bool,
}

impl LimiterKey<'_> {
    /// Propagates a write with `replicate`, which builds its effect, when an AOF or a
    /// replica may receive it; otherwise only counts the change.
    fn propagate(&self, replicate: impl FnOnce()) {
        if self.effects {
            replicate();
        } else {
            self.call.replicate_verbatim();
        }
    }

    /// Sends a string write's effects; `stored` is the object its value was stored as.
    fn send(&self, effects: [Option<Effect>; 2], stored: Option<&OwnedString>) {
        for effect in effects.iter().flatten() {
            replicate::propagate(self.call, self.key.name(), effect, stored);
        }
    }

    /// Signals a write of the key in the event class `class`.
    fn signal(&self, class: EventClass) {
        self.key.signal_modified(self.call.event, class);
    }

    /// After a write the server refused (which it does not for a key open for writing):
    /// the key must never be left without its expiry, nor differ from the replicas' copy.
    fn undo(&mut self) -> CommandError {
        if self.key.delete() {
            replicate::propagate(self.call, self.key.name(), &Effect::Delete, None);
        }
        CommandError::INTERNAL
    }

    /// Writes `bytes` over the key's string from `placement.at` on (growing it to end with
    /// them), and propagates the change; see [`LimiterKey::put_string`].
    fn patch(
        &mut self,
        bytes: &[u8],
        placement: Placement,
        expire_at: Millis,
    ) -> Result<(), CommandError> {
        let len = placement.at + bytes.len();
        // The decision read this key's string, at least `at` bytes long; anything else is a
        // bug, and nothing has changed yet. A patch never shortens the value: SETRANGE could
        // not do the same on replicas.
        let Held::String(stored_len) = self.key.held() else {
            return Err(CommandError::INTERNAL);
        };
        if stored_len < placement.at || stored_len > len {
            return Err(CommandError::INTERNAL);
        }
        if stored_len != len && !self.key.resize_string(len) {
            return Err(self.undo());
        }
        let Some(whole) = self.key.string_mut(len, false) else {
            return Err(self.undo());
        };
        whole[placement.at..].copy_from_slice(bytes);
        if !placement.expiry_kept && !self.key.set_expiry(expire_at) {
            return Err(self.undo());
        }
        self.propagate(|| {
            let after = self.key.string().unwrap_or_default();
            self.send(
                effect::string_effects(after, bytes, placement, expire_at),
                None,
            );
        });
        Ok(())
    }
}

impl Key for LimiterKey<'_> {
    type Error = CommandError;
    type View<'k, T: Native + 'k>
        = View<'k, T>
    where
        Self: 'k;

    /// The length is checked before the bytes are touched: reading a string through the
    /// key API converts an integer-encoded value to a raw one (the same bytes, another
    /// internal encoding), and a key that is not ours should be left exactly as it was.
    fn string(&self, accepts: impl Fn(usize) -> bool) -> Result<Option<&[u8]>, CommandError> {
        match self.key.held() {
            Held::Nothing => Ok(None),
            Held::String(len) if accepts(len) => {
                self.key.string().map(Some).ok_or(CommandError::WRONG_TYPE)
            }
            _ => Err(CommandError::WRONG_TYPE),
        }
    }

    fn native<T: Native>(&self) -> Result<Option<View<'_, T>>, CommandError> {
        match self.key.held() {
            Held::Nothing => Ok(None),
            Held::Native => self
                .key
                .native::<T>()
                .map(Some)
                .ok_or(CommandError::WRONG_TYPE),
            _ => Err(CommandError::WRONG_TYPE),
        }
    }

    /// A whole value (`placement.at == 0`) is propagated as `SET key value PXAT expiry`.
    /// The steady state, this module's string of the same length, is rewritten in place.
    /// A new key with nothing to propagate is made at its length and written in place too
    /// (the raw string a rewrite leaves: on Redis 7, 16 bytes less than `SET` stores for 13
    /// to 28 bytes). Otherwise the value gets a new string object, and the same object is
    /// what is propagated (making one for the effect instead would cost as much again).
    ///
    /// A patch (the bytes from `placement.at` on) is written in place, and propagated as
    /// `SETRANGE key at bytes` (with `PEXPIREAT key expiry` when the expiry moved): what a
    /// call costs and sends does not grow with the state. A value of at most
    /// [`effect::PATCH_ABOVE`] bytes goes whole instead, as one `SET`, which is cheaper than two
    /// commands.
    fn put_string(
        &mut self,
        value: &[u8],
        placement: Placement,
        expire_at: Millis,
    ) -> Result<(), CommandError> {
        if !self.key.writable() {
            return Err(CommandError::INTERNAL); // A bug in the caller: change nothing.
        }
        if placement.at > 0 {
            self.patch(value, placement, expire_at)?;
        } else if let Some(bytes) = self.key.string_mut(value.len(), !self.effects) {
            bytes.copy_from_slice(value);
            if !self.key.set_expiry(expire_at) {
                return Err(self.undo());
            }
            self.propagate(|| {
                let effects = effect::string_effects(value, value, placement, expire_at);
                self.send(effects, None);
            });
        } else {
            let Some(string) = self.key.set_string(value) else {
                return Err(self.undo());
            };
            if !self.key.set_expiry(expire_at) {
                return Err(self.undo());
            }
            self.propagate(|| {
                let effects = effect::string_effects(value, value, placement, expire_at);
                self.send(effects, Some(&string));
            });
        }
        self.signal(EventClass::String);
        Ok(())
    }

    /// The whole value as a new string, which `RedisModule_StringSet` stores without an
    /// expiry; propagated as `SET key value`.
    fn put_persistent(&mut self, value: &[u8]) -> Result<(), CommandError> {
        if !self.key.writable() || !matches!(self.key.held(), Held::Nothing | Held::String(_)) {
            return Err(CommandError::INTERNAL); // A bug in the caller: change nothing.
        }
        let Some(string) = self.key.set_string(value) else {
            return Err(self.undo());
        };
        self.propagate(|| {
            let effect = Effect::SetPersistent { value };
            replicate::propagate(self.call, self.key.name(), &effect, Some(&string));
        });
        self.signal(EventClass::String);
        Ok(())
    }

    fn delete(&mut self) -> Result<(), CommandError> {
        let class = match self.key.held() {
            Held::Native => EventClass::Module,
            _ => EventClass::String,
        };
        if !self.key.delete() {
            return Err(CommandError::INTERNAL);
        }
        self.signal(class);
        self.propagate(|| replicate::propagate(self.call, self.key.name(), &Effect::Delete, None));
        Ok(())
    }

    fn change_native<'e, T: Native + Default, R>(
        &mut self,
        create: bool,
        change: impl FnOnce(&mut T) -> NativeChange<R>,
        effect: impl FnOnce(&R) -> Effect<'e>,
    ) -> Result<Option<R>, CommandError> {
        let changed = match self.key.held() {
            Held::Native if self.key.holds_other_native::<T>() => {
                return Err(CommandError::WRONG_TYPE)
            }
            Held::Native => {
                let mut value = self.key.native_mut::<T>().ok_or(CommandError::INTERNAL)?;
                change(&mut value)
            }
            Held::Nothing if create => {
                let mut value = T::default();
                let changed = change(&mut value);
                if changed.changed && changed.after != After::Goes && !self.key.set_native(value) {
                    return Err(CommandError::INTERNAL);
                }
                changed
            }
            Held::Nothing => return Ok(None),
            _ => return Err(CommandError::WRONG_TYPE),
        };
        if !changed.changed {
            return Ok(Some(changed.reply));
        }
        let done = match changed.after {
            After::ExpiresAt(expire_at) => self.key.set_expiry(expire_at),
            After::KeepsItsExpiry => true,
            After::Goes => self.key.delete(),
        };
        if !done {
            // The value changed in place, but its key could not be finished: it goes, on
            // the master and its copies alike, as a string state's does.
            return Err(self.undo());
        }
        self.signal(EventClass::Module);
        let (call, name, verbatim) = (self.call, self.key.name(), self.verbatim);
        self.propagate(|| {
            if verbatim {
                call.replicate_verbatim();
            } else {
                replicate::propagate(call, name, &effect(&changed.reply), None);
            }
        });
        Ok(Some(changed.reply))
    }
}
