//! An in-memory [`Store`], for the cores' tests: keys with values and absolute expiries, as
//! the server keeps them, and the checks the server's key API would make (a write to a key
//! opened for reading, a patch that does not fit the value it patches, an expiry kept that
//! moved, a TTL of zero or less).

use std::cell::RefCell;
use std::collections::BTreeMap;

use super::{run, After, Call, Key, NativeChange, Settled, Store, Working};
use crate::core::codec::Placement;
use std::ffi::CStr;

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
        self.expire_at.0.saturating_mul(1_000) > now.0
    }
}

/// Keys in memory.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    entries: RefCell<BTreeMap<String, Entry>>,
    /// Every effect propagated, with its key, in order: `COMMAND fields`.
    effects: RefCell<Vec<(String, String)>>,
}

impl Memory {
    /// No keys.
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Runs `call` on the keys `keys` (one per limiter), as the server runs a command.
    pub fn run(&self, keys: &[&str], call: &Call) -> Result<Vec<Verdict>, StateError> {
        self.run_settled(keys, call).map(|(verdicts, _)| verdicts)
    }

    /// [`Memory::run`], with what the call settled (a wait, a quantity granted, a debt).
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
        let settled =
            run::<_, { super::MAX_LIMITERS }>(&store, call, &mut Working::new(), &mut verdicts)?;
        Ok((verdicts, settled))
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

    /// The effects propagated so far, with their keys: `COMMAND fields`.
    pub fn effects(&self) -> Vec<(String, String)> {
        self.effects.borrow().clone()
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
            self.now,
            write,
        ))
    }
}

/// One open key: what it held when opened, and where its writes go.
pub struct MemoryKey<'m> {
    memory: &'m Memory,
    name: String,
    now: Micros,
    write: bool,
    held: Option<Entry>,
}

impl<'m> MemoryKey<'m> {
    fn open(memory: &'m Memory, name: &str, now: Micros, write: bool) -> MemoryKey<'m> {
        MemoryKey {
            memory,
            name: name.to_owned(),
            now,
            write,
            held: memory.get(name, now),
        }
    }

    fn store(&mut self, entry: Option<Entry>) {
        assert!(self.write, "a write to {} opened for reading", self.name);
        if let Some(entry) = &entry {
            assert!(
                entry.live_at(self.now),
                "{} written with a TTL of zero or less",
                self.name
            );
        }
        let mut entries = self.memory.entries.borrow_mut();
        match entry.clone() {
            Some(entry) => entries.insert(self.name.clone(), entry),
            None => entries.remove(&self.name),
        };
        self.held = entry;
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
        let value = placement.place(stored, value);
        self.store(Some(Entry {
            value: Value::String(value),
            expire_at,
        }));
        Ok(())
    }

    fn delete(&mut self) -> Result<(), StateError> {
        self.store(None);
        Ok(())
    }

    fn change_native<T: Native + Default, R>(
        &mut self,
        create: bool,
        change: impl FnOnce(&mut T) -> NativeChange<R>,
        effect: impl FnOnce(&R, &mut Packed) -> &'static CStr,
    ) -> Result<Option<R>, StateError> {
        let mut value = match self.native::<T>()? {
            Some(held) => held.0,
            None if create => T::default(),
            None => return Ok(None),
        };
        let changed = change(&mut value);
        if changed.changed {
            let mut packed = Packed::default();
            let command = effect(&changed.reply, &mut packed);
            let fields = String::from_utf8_lossy(packed.as_bytes());
            let text = format!("{} {fields}", command.to_str().unwrap_or_default());
            self.memory
                .effects
                .borrow_mut()
                .push((self.name.clone(), text.trim_end().to_owned()));
            let expire_at = match changed.after {
                After::ExpiresAt(expire_at) => Some(expire_at),
                After::KeepsItsExpiry => Some(
                    self.held
                        .as_ref()
                        .map_or(Millis(i64::MAX), |entry| entry.expire_at),
                ),
                After::Goes => None,
            };
            let entry = expire_at.map(|expire_at| Entry {
                value: Value::Native(value.into_words()),
                expire_at,
            });
            self.store(entry);
        }
        Ok(Some(changed.reply))
    }
}
