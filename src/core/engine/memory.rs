//! An in-memory [`Store`], for the cores' tests: keys with values and absolute expiries, as
//! the server keeps them, and the checks the server's key API would make (a write to a key
//! opened for reading, a patch that does not fit the value it patches, an expiry kept that
//! moved, a TTL of zero or less).
//!
//! Every write sends its effect as the server would: encoded, then decoded again (which
//! must give the same effect) and applied to a replica that sees nothing else, as a
//! replica or an AOF replay does. After every call the replica must hold what the master
//! holds, byte for byte, expiry included: every test that runs the engine here checks
//! that effects round-trip.

use std::cell::RefCell;
use std::collections::BTreeMap;

use super::{apply, decide_and_commit, After, Call, Key, NativeChange, Settled, Store, Working};
use crate::core::codec::Placement;
use crate::core::effect::{self, Effect};
use crate::core::packed::Packed;
use crate::core::ring::{kind_of, Native};
use crate::core::time::{Micros, Millis};
use crate::core::verdict::Verdict;
use crate::core::windows::StateError;

/// What a key holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A string.
    String(Vec<u8>),
    /// A native value: its words.
    Native(Box<[u64]>),
}

/// A key: its value and when it expires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The value.
    pub value: Value,
    /// When the key expires.
    pub expire_at: Millis,
}

impl Entry {
    /// Whether the key still exists at `now`.
    fn live_at(&self, now: Micros) -> bool {
        self.expire_at.get().saturating_mul(1_000) > now.get()
    }
}

/// An effect as it was sent: the key, then the command and its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The key.
    pub key: String,
    /// The command, then its arguments after the key.
    pub words: Vec<Vec<u8>>,
}

impl Sent {
    /// `COMMAND arg ...`, for tests that read what travelled.
    pub fn text(&self) -> String {
        let words: Vec<String> = self
            .words
            .iter()
            .map(|word| String::from_utf8_lossy(word).into_owned())
            .collect();
        words.join(" ")
    }
}

/// Keys in memory: a master, and the replica its effects build.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    entries: RefCell<BTreeMap<String, Entry>>,
    /// Every effect sent, in order.
    sent: RefCell<Vec<Sent>>,
    /// The keys the effects alone build (`None` for a replica itself).
    replica: Option<Box<Memory>>,
}

impl Memory {
    /// No keys, and a replica.
    pub fn new() -> Memory {
        Memory {
            replica: Some(Box::default()),
            ..Memory::default()
        }
    }

    /// Runs `call` on the keys `keys` (one per limiter), as the server runs a command.
    pub fn run(&self, keys: &[&str], call: &Call) -> Result<Vec<Verdict>, StateError> {
        self.run_settled(keys, call).map(|(verdicts, _)| verdicts)
    }

    /// [`Memory::run`], with what the call settled (a wait, a quantity granted, a debt).
    /// Panics when the replica, which only saw the effects, holds anything else than the
    /// master.
    pub fn run_settled(
        &self,
        keys: &[&str],
        call: &Call,
    ) -> Result<(Vec<Verdict>, Settled), StateError> {
        let mut verdicts = vec![Verdict::default(); call.limiters.len()];
        let store = MemoryCall {
            memory: self,
            keys,
            now: call.now,
        };
        let settled = decide_and_commit::<_, { super::MAX_LIMITERS }>(
            &store,
            call,
            &mut Working::new(),
            &mut verdicts,
        );
        self.assert_replica_agrees(call);
        Ok((verdicts, settled?))
    }

    /// Applies `effect` to `key` on the master and its replica alike: what was there before
    /// a test's calls (a state another release wrote).
    pub fn seed(&self, key: &str, effect: &Effect) {
        self.apply(key, effect);
        if let Some(replica) = &self.replica {
            replica.apply(key, effect);
        }
    }

    /// Applies `effect` to `key` as a copy does (a replica, an AOF replay): the native
    /// effects through the engine, the string ones as the server applies its own commands.
    pub fn apply(&self, key: &str, effect: &Effect) {
        let mut entries = self.entries.borrow_mut();
        match *effect {
            Effect::Set { value, expire_at } => {
                entries.insert(
                    key.to_owned(),
                    Entry {
                        value: Value::String(value.to_vec()),
                        expire_at,
                    },
                );
            }
            Effect::SetPersistent { value } => {
                entries.insert(
                    key.to_owned(),
                    Entry {
                        value: Value::String(value.to_vec()),
                        expire_at: Millis::saturating(i64::MAX),
                    },
                );
            }
            Effect::SetRange { offset, bytes } => {
                let Some(Entry {
                    value: Value::String(value),
                    ..
                }) = entries.get_mut(key)
                else {
                    panic!("SETRANGE of {key}, which holds no string");
                };
                assert!(offset <= value.len(), "SETRANGE past the end of {key}");
                value.truncate(offset);
                value.extend_from_slice(bytes);
            }
            Effect::ExpireAt(expire_at) => {
                let entry = entries.get_mut(key).expect("PEXPIREAT of a missing key");
                entry.expire_at = expire_at;
            }
            Effect::Delete => {
                entries.remove(key);
            }
            _ => {
                drop(entries);
                let mut open = MemoryKey::open(self, key, None, true);
                apply(&mut open, effect).expect("a copy applies what its master sent");
            }
        }
    }

    /// Applies `effect` to `key` at `now` as a master does (an `RL.RELEASE`, an
    /// `RL.RENEW`): the change is sent to the replica, which must agree after it.
    pub fn change(&self, key: &str, effect: &Effect, now: Micros) -> Option<super::Applied> {
        let mut open = MemoryKey::open(self, key, Some(now), true);
        let applied = apply(&mut open, effect).expect("the key holds the effect's kind");
        if let Some(replica) = &self.replica {
            assert_eq!(
                *replica.entries.borrow(),
                *self.entries.borrow(),
                "{effect:?}"
            );
        }
        applied
    }

    /// `key` as the server holds it at `now`: gone once expired.
    pub fn get(&self, key: &str, now: Micros) -> Option<Entry> {
        let entries = self.entries.borrow();
        entries.get(key).filter(|entry| entry.live_at(now)).cloned()
    }

    /// Every key, expired or not.
    pub fn snapshot(&self) -> BTreeMap<String, Entry> {
        self.entries.borrow().clone()
    }

    /// The effects sent so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.sent.borrow().clone()
    }

    /// Sends `effect` for `key`: encoded as the server would send it, decoded again as a
    /// copy reads it (which must give it back), and applied to the replica.
    fn send(&self, key: &str, effect: &Effect) {
        let mut scratch = Packed::default();
        let encoded = effect.encode(&mut scratch);
        let mut words = vec![encoded.command.to_bytes().to_vec()];
        words.extend(encoded.args().iter().map(effect::Arg::bytes));
        let args: Vec<&[u8]> = words[1..].iter().map(Vec::as_slice).collect();
        let decoded = Effect::decode(&words[0], &args);
        assert_eq!(
            decoded.as_ref(),
            Ok(effect),
            "{:?} does not read back",
            words
        );
        if let Some(replica) = &self.replica {
            replica.apply(key, effect);
        }
        self.sent.borrow_mut().push(Sent {
            key: key.to_owned(),
            words,
        });
    }

    fn assert_replica_agrees(&self, call: &Call) {
        if let Some(replica) = &self.replica {
            assert_eq!(
                *replica.entries.borrow(),
                *self.entries.borrow(),
                "the replica, which applied the effects, differs from the master after {call:?}",
            );
        }
    }
}

/// The keys of one call.
struct MemoryCall<'m> {
    memory: &'m Memory,
    keys: &'m [&'m str],
    now: Micros,
}

impl Store for MemoryCall<'_> {
    type Error = StateError;
    type Key<'s>
        = MemoryKey<'s>
    where
        Self: 's;

    fn open(&self, index: usize, write: bool) -> Result<MemoryKey<'_>, StateError> {
        Ok(MemoryKey::open(
            self.memory,
            self.keys[index],
            Some(self.now),
            write,
        ))
    }
}

/// One open key: what it held when opened, and where its writes go.
pub struct MemoryKey<'m> {
    memory: &'m Memory,
    name: String,
    /// The call's time on a master, where a key that expired is gone; `None` on a copy,
    /// which applies what its master sends to the key as it holds it.
    now: Option<Micros>,
    write: bool,
    held: Option<Entry>,
}

impl<'m> MemoryKey<'m> {
    fn open(memory: &'m Memory, name: &str, now: Option<Micros>, write: bool) -> MemoryKey<'m> {
        let held = match now {
            Some(now) => memory.get(name, now),
            None => memory.entries.borrow().get(name).cloned(),
        };
        MemoryKey {
            memory,
            name: name.to_owned(),
            now,
            write,
            held,
        }
    }

    fn store(&mut self, entry: Option<Entry>) {
        assert!(self.write, "a write to {} opened for reading", self.name);
        if let (Some(entry), Some(now)) = (&entry, self.now) {
            assert!(
                entry.live_at(now),
                "{} written with a TTL of zero or less",
                self.name
            );
        }
        let mut entries = self.memory.entries.borrow_mut();
        if self.held.is_none() && entries.contains_key(&self.name) {
            // The master's server deletes a key that expired when it is next written, and
            // tells its copies so before the write's own effect.
            entries.remove(&self.name);
            drop(entries);
            self.send(&Effect::Delete);
            entries = self.memory.entries.borrow_mut();
        }
        match entry.clone() {
            Some(entry) => entries.insert(self.name.clone(), entry),
            None => entries.remove(&self.name),
        };
        self.held = entry;
    }

    /// Sends an effect, from a master (a copy sends on what it received as it came).
    fn send(&self, effect: &Effect) {
        if self.now.is_some() {
            self.memory.send(&self.name, effect);
        }
    }
}

/// A native value read from memory: a copy.
pub struct Copied<T>(T);

impl<T> std::ops::Deref for Copied<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl Key for MemoryKey<'_> {
    type Error = StateError;
    type View<'k, T: Native + 'k>
        = Copied<T>
    where
        Self: 'k;

    fn string(&self, accepts: impl Fn(usize) -> bool) -> Result<Option<&[u8]>, StateError> {
        match &self.held {
            None => Ok(None),
            Some(Entry {
                value: Value::String(bytes),
                ..
            }) if accepts(bytes.len()) => Ok(Some(bytes)),
            Some(_) => Err(StateError::Foreign),
        }
    }

    fn native<T: Native>(&self) -> Result<Option<Copied<T>>, StateError> {
        match &self.held {
            None => Ok(None),
            Some(Entry {
                value: Value::Native(words),
                ..
            }) if kind_of(words[0]) == T::KIND => Ok(Some(Copied(T::from_words(words.clone())))),
            Some(_) => Err(StateError::Foreign),
        }
    }

    fn put_string(
        &mut self,
        value: &[u8],
        placement: Placement,
        expire_at: Millis,
    ) -> Result<(), StateError> {
        let stored = match &self.held {
            Some(Entry {
                value: Value::String(bytes),
                expire_at: kept,
            }) => {
                if placement.expiry_kept {
                    assert_eq!(*kept, expire_at, "an expiry kept that moved");
                }
                Some(bytes.as_slice())
            }
            Some(_) => panic!("a string written over another type"),
            None => {
                assert!(!placement.expiry_kept, "an expiry kept on a missing key");
                None
            }
        };
        let after = placement.place(stored, value);
        self.store(Some(Entry {
            value: Value::String(after.clone()),
            expire_at,
        }));
        for effect in effect::string_effects(&after, value, placement, expire_at)
            .iter()
            .flatten()
        {
            self.send(effect);
        }
        Ok(())
    }

    fn put_persistent(&mut self, value: &[u8]) -> Result<(), StateError> {
        assert!(
            matches!(
                &self.held,
                None | Some(Entry {
                    value: Value::String(_),
                    ..
                })
            ),
            "a string written over another type"
        );
        self.store(Some(Entry {
            value: Value::String(value.to_vec()),
            expire_at: Millis::saturating(i64::MAX),
        }));
        self.send(&Effect::SetPersistent { value });
        Ok(())
    }

    fn delete(&mut self) -> Result<(), StateError> {
        self.store(None);
        self.send(&Effect::Delete);
        Ok(())
    }

    fn change_native<'e, T: Native + Default, R>(
        &mut self,
        create: bool,
        change: impl FnOnce(&mut T) -> NativeChange<R>,
        effect: impl FnOnce(&R) -> Effect<'e>,
    ) -> Result<Option<R>, StateError> {
        let mut value = match self.native::<T>()? {
            Some(held) => held.0,
            None if create => T::default(),
            None => return Ok(None),
        };
        let changed = change(&mut value);
        if changed.changed {
            let expire_at = match changed.after {
                After::ExpiresAt(expire_at) => Some(expire_at),
                After::KeepsItsExpiry => Some(
                    self.held
                        .as_ref()
                        .map_or(Millis::saturating(i64::MAX), |entry| entry.expire_at),
                ),
                After::Goes => None,
            };
            let entry = expire_at.map(|expire_at| Entry {
                value: Value::Native(value.into_words()),
                expire_at,
            });
            self.store(entry);
            self.send(&effect(&changed.reply));
        }
        Ok(Some(changed.reply))
    }
}
