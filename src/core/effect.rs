//! What a write sends to replicas and the AOF: its effect, defined once. Each [`Effect`] is
//! one command for one key; [`Effect::encode`] gives the command's arguments and
//! [`Effect::decode`] reads them back, side by side, so that what a master sends is exactly
//! what a replica, an AOF replay or a slot migration's target parses.
//!
//! - A string state travels as Redis' own commands, with absolute times: `SET key value
//!   PXAT ms`, `SETRANGE key offset bytes`, `PEXPIREAT key ms`, `DEL key`
//!   ([`string_effects`] says which a write makes).
//! - A native value's change travels as an internal command carrying the change the master
//!   decided (never the call, which depends on the clock and on the other limiters of an
//!   `RL.ALL`): `RL.LOG.APPLY` ([`LogEffect`]) and `RL.LEASE.APPLY` ([`LeaseEffect`]). The
//!   master applies the same effect to its own value ([`LogEffect::apply`],
//!   [`LeaseEffect::apply`]) that a replica applies to its copy: one path, so the copies
//!   cannot differ.
//! - An AOF rewrite rebuilds a native value in chunks: `RL.LOG.LOADCHUNK` and
//!   `RL.LEASE.LOADCHUNK`.
//!
//! The fields of the internal commands are packed in one argument ([`super::packed`]), each
//! option on its own field: `RL.LOG.APPLY key 100,60000000,1763850000000000,TAKE,1`.
//! `RL.LOG.REPLAY`, what releases before 0.3 sent for a log, is still read
//! ([`LegacyLogReplay`]) so that their AOFs load and their masters can feed a newer replica.

use std::ffi::CStr;

use super::block;
use super::codec::Placement;
use super::lease::{self, LeaseLimiter, LeaseSet};
use super::log::{LogLimiter, SlidingLog};
use super::packed::{self, Packed};
use super::params::{self, ParamError};
use super::request::{Request, Shortfall};
use super::time::{Micros, Millis, Unit};
use super::verdict::Verdict;

/// `RL.LOG.APPLY`: a log's change, as the master decided it.
pub const LOG_APPLY: &CStr = c"RL.LOG.APPLY";
/// `RL.LEASE.APPLY`: a lease set's change, with the master's time and lease id.
pub const LEASE_APPLY: &CStr = c"RL.LEASE.APPLY";
/// `RL.LOG.LOADCHUNK`: entries an AOF rewrite appends to a log.
pub const LOG_LOAD_CHUNK: &CStr = c"RL.LOG.LOADCHUNK";
/// `RL.LEASE.LOADCHUNK`: leases an AOF rewrite appends to a set.
pub const LEASE_LOAD_CHUNK: &CStr = c"RL.LEASE.LOADCHUNK";

/// The most bytes of a string state sent whole when only its end changed: below this, one
/// `SET` costs less than a `SETRANGE` and a `PEXPIREAT`.
pub const PATCH_ABOVE: usize = 64;

/// One command a write sends for one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect<'a> {
    /// `SET key value PXAT expire_at`.
    Set {
        /// The key's whole value.
        value: &'a [u8],
        /// When it expires.
        expire_at: Millis,
    },
    /// `SET key value`: a value kept without an expiry (a load state holding a policy,
    /// which is configuration).
    SetPersistent {
        /// The key's whole value.
        value: &'a [u8],
    },
    /// `SETRANGE key offset bytes`: the value's end rewritten (or grown).
    SetRange {
        /// Where the bytes go.
        offset: usize,
        /// The bytes.
        bytes: &'a [u8],
    },
    /// `PEXPIREAT key expire_at`.
    ExpireAt(Millis),
    /// `DEL key`.
    Delete,
    /// `RL.LOG.APPLY key fields`.
    Log(LogEffect),
    /// `RL.LEASE.APPLY key fields`.
    Lease(LeaseEffect),
    /// `RL.LOG.LOADCHUNK key entries [BLOCKED until_us]`.
    LogChunk {
        /// Serialized entries ([`SlidingLog::serialize`]).
        entries: &'a [u8],
        /// The end of the log's penalty block, with the last chunk.
        blocked_until: Option<Micros>,
    },
    /// `RL.LEASE.LOADCHUNK key next_id leases`.
    LeaseChunk {
        /// The set's next lease id.
        next_id: u64,
        /// Serialized leases ([`LeaseSet::serialize`]).
        leases: &'a [u8],
    },
}

/// One argument of an encoded effect, after the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg<'a> {
    /// The key's new value: the server layer may send the string object it just stored.
    Value(&'a [u8]),
    /// Bytes.
    Bytes(&'a [u8]),
    /// An absolute expiry in milliseconds, in decimal: keys that expire together send the
    /// same text, which the server layer keeps as one string object.
    Expiry(Millis),
    /// A keyword.
    Word(Word),
}

/// A keyword an effect carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    /// `SET`'s absolute expiry follows.
    Pxat,
    /// A log chunk's block follows.
    Blocked,
}

impl Word {
    /// Every keyword, in the order of their values.
    pub const ALL: [Word; 2] = [Word::Pxat, Word::Blocked];

    /// The keyword as sent.
    pub const fn text(self) -> &'static [u8] {
        match self {
            Word::Pxat => b"PXAT",
            Word::Blocked => b"BLOCKED",
        }
    }
}

impl Arg<'_> {
    /// The argument as the server receives it.
    #[cfg(test)]
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Arg::Value(bytes) | Arg::Bytes(bytes) => bytes.to_vec(),
            Arg::Expiry(expire_at) => packed::Decimal::new(expire_at.get()).as_bytes().to_vec(),
            Arg::Word(word) => word.text().to_vec(),
        }
    }
}

/// An effect as a command: its name and its arguments after the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoded<'a> {
    /// The command.
    pub command: &'static CStr,
    args: [Arg<'a>; 3],
    len: usize,
}

impl<'a> Encoded<'a> {
    fn new<const L: usize>(command: &'static CStr, given: [Arg<'a>; L]) -> Encoded<'a> {
        let mut args = [Arg::Bytes(&[]); 3];
        args[..L].copy_from_slice(&given);
        Encoded {
            command,
            args,
            len: L,
        }
    }

    /// The arguments after the key.
    pub fn args(&self) -> &[Arg<'a>] {
        &self.args[..self.len]
    }
}

/// Why a command's arguments are not an effect this module sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EffectError {
    /// Not a command, or not a form, that carries an effect.
    Unknown,
    /// `RL.LOG.APPLY` or `RL.LOG.REPLAY` fields that are not a log's change.
    Log,
    /// `RL.LEASE.APPLY` fields that are not a lease change.
    Lease,
    /// An integer field that is not one.
    NotAnInteger,
    /// A time field out of range: an instant before the epoch or after the year 2262, or a
    /// span longer than that.
    Time,
    /// A limiter's parameters out of range.
    Param(ParamError),
}

impl From<ParamError> for EffectError {
    fn from(error: ParamError) -> EffectError {
        EffectError::Param(error)
    }
}

impl EffectError {
    /// The error reply.
    pub fn message(self) -> &'static CStr {
        match self {
            EffectError::Unknown => c"ERR not an effect this module propagates",
            EffectError::Log => c"ERR RL.LOG.APPLY: not a change this module propagates",
            EffectError::Lease => c"ERR RL.LEASE.APPLY: not a change this module propagates",
            EffectError::NotAnInteger => c"ERR an effect's field is not an integer",
            EffectError::Time => {
                c"ERR an effect's time is out of range (an instant from the epoch to 2262, a span as long)"
            }
            EffectError::Param(error) => error.message(),
        }
    }
}

impl<'a> Effect<'a> {
    /// The command and arguments that carry the effect; `scratch` holds fields formatted on
    /// the way, and must live as long as the result.
    pub fn encode<'s>(&'s self, scratch: &'s mut Packed) -> Encoded<'s>
    where
        'a: 's,
    {
        match *self {
            Effect::SetPersistent { value } => Encoded::new(c"SET", [Arg::Value(value)]),
            Effect::Set { value, expire_at } => Encoded::new(
                c"SET",
                [
                    Arg::Value(value),
                    Arg::Word(Word::Pxat),
                    Arg::Expiry(expire_at),
                ],
            ),
            Effect::SetRange { offset, bytes } => {
                scratch.int(offset as i64);
                Encoded::new(
                    c"SETRANGE",
                    [Arg::Bytes(scratch.as_bytes()), Arg::Bytes(bytes)],
                )
            }
            Effect::ExpireAt(expire_at) => Encoded::new(c"PEXPIREAT", [Arg::Expiry(expire_at)]),
            Effect::Delete => Encoded::new(c"DEL", []),
            Effect::Log(effect) => {
                effect.pack(scratch);
                Encoded::new(LOG_APPLY, [Arg::Bytes(scratch.as_bytes())])
            }
            Effect::Lease(effect) => {
                effect.pack(scratch);
                Encoded::new(LEASE_APPLY, [Arg::Bytes(scratch.as_bytes())])
            }
            Effect::LogChunk {
                entries,
                blocked_until: None,
            } => Encoded::new(LOG_LOAD_CHUNK, [Arg::Bytes(entries)]),
            Effect::LogChunk {
                entries,
                blocked_until: Some(until),
            } => {
                scratch.int(until.get());
                Encoded::new(
                    LOG_LOAD_CHUNK,
                    [
                        Arg::Bytes(entries),
                        Arg::Word(Word::Blocked),
                        Arg::Bytes(scratch.as_bytes()),
                    ],
                )
            }
            Effect::LeaseChunk { next_id, leases } => {
                scratch.int(next_id as i64);
                Encoded::new(
                    LEASE_LOAD_CHUNK,
                    [Arg::Bytes(scratch.as_bytes()), Arg::Bytes(leases)],
                )
            }
        }
    }

    /// Reads the effect `command` carries, given its arguments after the key; the command's
    /// name in any letter case.
    pub fn decode(command: &[u8], args: &[&'a [u8]]) -> Result<Effect<'a>, EffectError> {
        let is = |name: &CStr| command.eq_ignore_ascii_case(name.to_bytes());
        if is(c"SET") {
            if let [value] = args {
                return Ok(Effect::SetPersistent { value });
            }
            let [value, pxat, expire_at] = args else {
                return Err(EffectError::Unknown);
            };
            if !pxat.eq_ignore_ascii_case(Word::Pxat.text()) {
                return Err(EffectError::Unknown);
            }
            Ok(Effect::Set {
                value,
                expire_at: Millis::new(integer(expire_at)?).ok_or(EffectError::Time)?,
            })
        } else if is(c"SETRANGE") {
            let [offset, bytes] = args else {
                return Err(EffectError::Unknown);
            };
            let offset = usize::try_from(integer(offset)?).map_err(|_| EffectError::Unknown)?;
            Ok(Effect::SetRange { offset, bytes })
        } else if is(c"PEXPIREAT") {
            let [expire_at] = args else {
                return Err(EffectError::Unknown);
            };
            Ok(Effect::ExpireAt(
                Millis::new(integer(expire_at)?).ok_or(EffectError::Time)?,
            ))
        } else if is(c"DEL") {
            args.is_empty()
                .then_some(Effect::Delete)
                .ok_or(EffectError::Unknown)
        } else if is(LOG_APPLY) {
            let [fields] = args else {
                return Err(EffectError::Log);
            };
            LogEffect::unpack(fields).map(Effect::Log)
        } else if is(LEASE_APPLY) {
            let [fields] = args else {
                return Err(EffectError::Lease);
            };
            LeaseEffect::unpack(fields).map(Effect::Lease)
        } else if is(LOG_LOAD_CHUNK) {
            match args {
                [entries] => Ok(Effect::LogChunk {
                    entries,
                    blocked_until: None,
                }),
                [entries, keyword, until] if keyword.eq_ignore_ascii_case(Word::Blocked.text()) => {
                    Ok(Effect::LogChunk {
                        entries,
                        blocked_until: Some(instant(until)?),
                    })
                }
                _ => Err(EffectError::Unknown),
            }
        } else if is(LEASE_LOAD_CHUNK) {
            let [next_id, leases] = args else {
                return Err(EffectError::Unknown);
            };
            let next_id = u64::try_from(integer(next_id)?).map_err(|_| EffectError::Unknown)?;
            Ok(Effect::LeaseChunk { next_id, leases })
        } else {
            Err(EffectError::Unknown)
        }
    }
}

/// A decimal integer field.
fn integer(field: &[u8]) -> Result<i64, EffectError> {
    packed::parse_integer(field).ok_or(EffectError::NotAnInteger)
}

/// An instant field, in microseconds since the epoch: the master's clock, which never reads
/// before the epoch nor after [`Micros::LATEST`].
fn instant(field: &[u8]) -> Result<Micros, EffectError> {
    Micros::instant(integer(field)?).ok_or(EffectError::Time)
}

/// A span field in microseconds, not negative.
fn span(field: &[u8]) -> Result<Micros, EffectError> {
    Micros::instant(integer(field)?).ok_or(EffectError::Time)
}

/// A lease id: from 1 to [`lease::MAX_ID`].
fn lease_id(field: &[u8]) -> Result<u64, EffectError> {
    Some(positive(field)?)
        .filter(|&id| id <= lease::MAX_ID)
        .ok_or(EffectError::Lease)
}

/// A positive integer field.
fn positive(field: &[u8]) -> Result<u64, EffectError> {
    u64::try_from(integer(field)?)
        .ok()
        .filter(|&value| value > 0)
        .ok_or(EffectError::NotAnInteger)
}

/// The effects a string write makes: the key's value `after` the write, of which `written`
/// are the bytes placed from `placement.at` on (all of it for a whole value), expiring at
/// `expire_at`. A whole value, or one of at most [`PATCH_ABOVE`] bytes, goes as one `SET`;
/// a longer value changed at its end as `SETRANGE`, with `PEXPIREAT` when the expiry moved,
/// so that what a call sends does not grow with the state.
pub fn string_effects<'a>(
    after: &'a [u8],
    written: &'a [u8],
    placement: Placement,
    expire_at: Millis,
) -> [Option<Effect<'a>>; 2] {
    if placement.at == 0 || after.len() <= PATCH_ABOVE {
        return [
            Some(Effect::Set {
                value: after,
                expire_at,
            }),
            None,
        ];
    }
    [
        Some(Effect::SetRange {
            offset: placement.at,
            bytes: written,
        }),
        (!placement.expiry_kept).then_some(Effect::ExpireAt(expire_at)),
    ]
}

/// A log's change, as the master decided it: everything a copy needs to reach the same log
/// and the same expiry, without a clock and without the call's other limiters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEffect {
    /// The log's parameters.
    pub limiter: LogLimiter,
    /// The call's time, on the master.
    pub now: Micros,
    /// What changes.
    pub change: LogChange,
}

/// What changes in a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogChange {
    /// `quantity` is logged at `at`: the call's time, or the later time a delayed request
    /// goes ahead (`DELAY`). The quantity is what the call settled (what fit, with
    /// `AT_MOST`).
    Take {
        /// How much.
        quantity: u64,
        /// When it counts from.
        at: Micros,
    },
    /// `quantity` given back (`REFUND`).
    Refund {
        /// How much.
        quantity: u64,
    },
    /// A penalty block starts, ending then (`BLOCK`).
    Block {
        /// When it ends.
        until: Micros,
    },
    /// `quantity` logged whatever it takes (`FORCE`): what fits now, the rest when it fits.
    Force {
        /// How much.
        quantity: u64,
    },
}

/// What applying a log's change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogApplied {
    /// The reply after the change, when the change decides it (a refund's standing after,
    /// a forced take's); `None` when the decision's reply stands.
    pub reply: Option<Verdict>,
    /// When the key expires, or `None` when it goes (a refund left nothing counted, and no
    /// block is in force).
    pub expire_at: Option<Millis>,
}

impl LogEffect {
    /// Applies the change to `log`: what the master does once it has decided, and what a
    /// copy does on receiving the effect.
    pub fn apply(&self, log: &mut SlidingLog) -> LogApplied {
        let (limiter, now) = (&self.limiter, self.now);
        // The block in force, read once: only a new block changes it.
        let mut block = block::in_force(log.blocked_until(), now);
        let mut reply = None;
        match self.change {
            LogChange::Take { quantity, at } => {
                if block.is_none() {
                    log.set_blocked_until(Micros::ZERO);
                }
                let live = limiter.survey(Some(log), at);
                limiter.log_surveyed(log, live, at, quantity);
            }
            LogChange::Refund { quantity } => {
                let scheduled = Some(log.newest()).filter(|&newest| newest > now);
                let (after, _) = limiter.refund(log, now, quantity);
                if let Some(until) = scheduled.filter(|&until| log.newest() < until) {
                    // Logging a request scheduled ahead dropped the entries gone by its
                    // time, which still count until then: with it given back, the log
                    // stays closed until then, as a block would keep it.
                    log.set_blocked_until(log.blocked_until().max(until));
                    block = block::in_force(log.blocked_until(), now);
                }
                reply = Some(match block {
                    Some(until) => block::blocked_verdict(after, until, now),
                    None => after,
                });
            }
            LogChange::Block { until } => {
                // The block starts from none (see `block`).
                log.clear();
                log.set_blocked_until(until);
                block = block::in_force(until, now);
            }
            LogChange::Force { quantity } => {
                if block.is_none() {
                    log.set_blocked_until(Micros::ZERO);
                }
                reply = Some(super::limiter::force_log(limiter, log, now, quantity));
            }
        }
        let block_end = block.map(Micros::ceil_millis);
        // A take just logged counts: no need to look.
        let taken = matches!(
            self.change,
            LogChange::Take { .. } | LogChange::Force { .. }
        );
        let own_end = (taken || !limiter.is_spent(log, now)).then(|| limiter.expire_at(log));
        LogApplied {
            reply,
            expire_at: own_end.max(block_end),
        }
    }

    /// `limit,window_us,now_us,TAKE,quantity[,at_us]` (the time only when later than the
    /// call's), `...,REFUND,quantity`, `...,BLOCK,until_us` or `...,FORCE,quantity`.
    fn pack(&self, packed: &mut Packed) {
        packed
            .int(self.limiter.limit() as i64)
            .int(self.limiter.window().get())
            .int(self.now.get());
        match self.change {
            LogChange::Take { quantity, at } => {
                packed.word("TAKE").int(quantity as i64);
                if at != self.now {
                    packed.int(at.get());
                }
            }
            LogChange::Refund { quantity } => {
                packed.word("REFUND").int(quantity as i64);
            }
            LogChange::Block { until } => {
                packed.word("BLOCK").int(until.get());
            }
            LogChange::Force { quantity } => {
                packed.word("FORCE").int(quantity as i64);
            }
        }
    }

    fn unpack(fields: &[u8]) -> Result<LogEffect, EffectError> {
        let mut unpacked = [&[][..]; 6];
        let packed = [fields];
        let fields = packed::unpack(&packed, &mut unpacked).ok_or(EffectError::Log)?;
        let [limit, window, now, change, rest @ ..] = fields else {
            return Err(EffectError::Log);
        };
        let limiter = LogLimiter::new(integer(limit)?, integer(window)?, Unit::Microseconds)?;
        let now = instant(now)?;
        let change = match (&change.to_ascii_uppercase()[..], rest) {
            (b"TAKE", [quantity]) => LogChange::Take {
                quantity: positive(quantity)?,
                at: now,
            },
            (b"TAKE", [quantity, at]) => LogChange::Take {
                quantity: positive(quantity)?,
                at: instant(at)?.max(now),
            },
            (b"REFUND", [quantity]) => LogChange::Refund {
                quantity: positive(quantity)?,
            },
            (b"BLOCK", [until]) => LogChange::Block {
                until: instant(until)?,
            },
            (b"FORCE", [quantity]) => {
                let quantity = positive(quantity)?;
                params::force_quantity(quantity, limiter.limit())?;
                LogChange::Force { quantity }
            }
            _ => return Err(EffectError::Log),
        };
        if let LogChange::Take { quantity, .. } = change {
            if quantity > limiter.limit() {
                return Err(EffectError::Log);
            }
        }
        Ok(LogEffect {
            limiter,
            now,
            change,
        })
    }
}

/// A lease set's change, with the master's time and the id it chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseEffect {
    /// The call's time, on the master.
    pub now: Micros,
    /// What changes.
    pub change: LeaseChange,
}

/// What changes in a lease set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseChange {
    /// A lease of `quantity` slots is taken as `id` (`RL.ACQUIRE`, or `LEASE` in `RL.ALL`).
    Acquire {
        /// The limit and the lease's length.
        limiter: LeaseLimiter,
        /// The slots.
        quantity: u64,
        /// The lease's id.
        id: u64,
    },
    /// Lease `id` ends now (`RL.RELEASE`).
    Release {
        /// The lease.
        id: u64,
    },
    /// Lease `id` ends `lease` from now instead (`RL.RENEW`).
    Renew {
        /// The lease.
        id: u64,
        /// Its new length, from now.
        lease: Micros,
    },
}

/// What applying a lease change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseApplied {
    /// The acquire was admitted, or the lease released or renewed was held.
    pub done: bool,
    /// Whether the set changed (a refused acquire changes nothing; a release or renewal of a
    /// lease no longer held may still drop leases that ended).
    pub changed: bool,
}

impl LeaseEffect {
    /// Applies the change to `set`: what the master does once it has decided, and what a
    /// copy does on receiving the effect.
    pub fn apply(&self, set: &mut LeaseSet) -> LeaseApplied {
        let before = set.len();
        let done = match self.change {
            LeaseChange::Acquire {
                limiter,
                quantity,
                id,
            } => {
                // Admitted on the master: taken as it decided.
                let done = limiter.hold(set, self.now, quantity, id);
                return LeaseApplied {
                    done,
                    changed: done || set.len() != before,
                };
            }
            LeaseChange::Release { id } => lease::release(set, self.now, id),
            LeaseChange::Renew { id, lease } => lease::renew(set, self.now, id, lease),
        };
        LeaseApplied {
            done,
            changed: done || set.len() != before,
        }
    }

    /// `ACQUIRE,now_us,limit,lease_us,quantity,id`, `RELEASE,now_us,id` or
    /// `RENEW,now_us,id,lease_us`.
    fn pack(&self, packed: &mut Packed) {
        match self.change {
            LeaseChange::Acquire {
                limiter,
                quantity,
                id,
            } => {
                packed
                    .word("ACQUIRE")
                    .int(self.now.get())
                    .int(limiter.limit() as i64)
                    .int(limiter.lease().get())
                    .int(quantity as i64)
                    .int(id as i64);
            }
            LeaseChange::Release { id } => {
                packed.word("RELEASE").int(self.now.get()).int(id as i64);
            }
            LeaseChange::Renew { id, lease } => {
                packed
                    .word("RENEW")
                    .int(self.now.get())
                    .int(id as i64)
                    .int(lease.get());
            }
        }
    }

    fn unpack(fields: &[u8]) -> Result<LeaseEffect, EffectError> {
        let mut unpacked = [&[][..]; 6];
        let packed = [fields];
        let fields = packed::unpack(&packed, &mut unpacked).ok_or(EffectError::Lease)?;
        let [change, now, rest @ ..] = fields else {
            return Err(EffectError::Lease);
        };
        let now = instant(now)?;
        let change = match (&change.to_ascii_uppercase()[..], rest) {
            (b"ACQUIRE", [limit, lease, quantity, id]) => {
                let limiter =
                    LeaseLimiter::new(integer(limit)?, integer(lease)?, Unit::Microseconds)?;
                let quantity = positive(quantity)?;
                if quantity > limiter.limit() {
                    return Err(EffectError::Lease);
                }
                LeaseChange::Acquire {
                    limiter,
                    quantity,
                    id: lease_id(id)?,
                }
            }
            (b"RELEASE", [id]) => LeaseChange::Release { id: lease_id(id)? },
            (b"RENEW", [id, lease]) => LeaseChange::Renew {
                id: lease_id(id)?,
                lease: params::lease(integer(lease)?, Unit::Microseconds)?,
            },
            _ => return Err(EffectError::Lease),
        };
        Ok(LeaseEffect { now, change })
    }
}

/// A log's change as releases before 0.3 propagated it: the call again, with the master's
/// time, for the engine to decide again. Only read, from their AOFs and masters:
/// `RL.LOG.REPLAY key limit,window_us,quantity,now_us[,REFUND|,BLOCK,us|,DELAY,us|,AT_MOST|,FORCE]`,
/// or the same fields as separate arguments (0.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LegacyLogReplay {
    /// The log's parameters.
    pub limiter: LogLimiter,
    /// The call's request.
    pub request: Request,
    /// The call's time, on the master.
    pub now: Micros,
}

impl LegacyLogReplay {
    /// Reads the arguments after the key.
    pub fn decode(args: &[&[u8]]) -> Result<LegacyLogReplay, EffectError> {
        let mut unpacked = [&[][..]; 6];
        let fields = packed::unpack(args, &mut unpacked).ok_or(EffectError::Log)?;
        let [limit, window, quantity, now, tail @ ..] = fields else {
            return Err(EffectError::Log);
        };
        let limiter = LogLimiter::new(integer(limit)?, integer(window)?, Unit::Microseconds)?;
        let quantity = u64::try_from(integer(quantity)?).map_err(|_| EffectError::Log)?;
        let take = Request::take(quantity);
        let word = |field: &[u8], word: &str| field.eq_ignore_ascii_case(word.as_bytes());
        let request = match tail {
            [] => take,
            [refund] if word(refund, "REFUND") => Request::refund(quantity),
            [block, duration] if word(block, "BLOCK") => Request {
                block: Some(span(duration)?.max(Micros::saturating(1))),
                ..take
            },
            [force] if word(force, "FORCE") => {
                // As the command itself checks it: a debt of at most 16 limits.
                params::force_quantity(quantity, limiter.limit())?;
                Request {
                    shortfall: Shortfall::Force,
                    ..take
                }
            }
            [at_most] if word(at_most, "AT_MOST") => Request {
                shortfall: Shortfall::AtMost,
                ..take
            },
            [delay, max_wait] if word(delay, "DELAY") => Request {
                shortfall: Shortfall::Delay(span(max_wait)?),
                ..take
            },
            _ => return Err(EffectError::Log),
        };
        Ok(LegacyLogReplay {
            limiter,
            request,
            now: instant(now)?,
        })
    }
}

#[cfg(test)]
mod tests;
