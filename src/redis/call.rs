//! One call of a command, as the commands see it: its arguments as bytes, its keys, its
//! context flags, what it propagates as itself, and the reply it gives.

use std::cell::Cell;
use std::ffi::CStr;

use redis_module::raw;

use crate::core::engine::MAX_LIMITERS;
use crate::core::top::Estimate;
use crate::redis::stats::Outcome;

/// A key named by a call: one of its arguments, as the server passed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyName(pub(crate) *mut raw::RedisModuleString);

/// The context flags of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextFlags(u32);

impl ContextFlags {
    /// Whether the call comes from a master's replication stream (or a slot migration's),
    /// or from the AOF being loaded.
    pub fn is_from_master_or_aof(self) -> bool {
        let applying = raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING;
        self.0 & applying != 0
    }

    /// Whether a client's call runs over `maxmemory`: never for what a master or the AOF
    /// sends.
    pub fn out_of_memory(self) -> bool {
        self.0 & raw::REDISMODULE_CTX_FLAGS_OOM != 0 && !self.is_from_master_or_aof()
    }

    /// Whether a write must build its effect, because an AOF or a replication stream may
    /// receive it (or because the server is loading or a replica, where the module does not
    /// second-guess it).
    pub fn effects_needed(self) -> bool {
        let listening = raw::REDISMODULE_CTX_FLAGS_AOF
            | raw::REDISMODULE_CTX_FLAGS_SLAVE
            | raw::REDISMODULE_CTX_FLAGS_LOADING
            | raw::REDISMODULE_CTX_FLAGS_REPLICATED;
        self.0 & listening != 0
    }
}

/// One call of a command.
pub struct Invocation<'a> {
    /// The server's context of the call.
    pub(crate) ctx: *mut raw::RedisModuleCtx,
    /// The keyspace event its writes fire: the name of the command clients call.
    pub event: &'static CStr,
    /// The arguments as the server's strings, the command's name first.
    pub(crate) argv: &'a [*mut raw::RedisModuleString],
    /// The same arguments as bytes; the command's name, and the key of a single-key
    /// command, are left empty: they are only ever used as the server's strings.
    pub args: &'a [&'a [u8]],
    /// The context flags, once read.
    pub(crate) flags: Cell<Option<ContextFlags>>,
}

impl Invocation<'_> {
    /// Argument `index` (0 is the command's name) as a key name.
    pub fn key(&self, index: usize) -> KeyName {
        KeyName(self.argv[index])
    }

    /// Argument `index` as bytes, the key `args` leaves empty included.
    pub fn arg_bytes(&self, index: usize) -> &[u8] {
        // SAFETY: the server's argument strings live as long as the call.
        unsafe { crate::redis::handler::string_bytes(self.argv[index]) }
    }

    /// The call's context flags, read once however many keys the call opens: they do not
    /// change during a call.
    pub fn context_flags(&self) -> ContextFlags {
        if let Some(flags) = self.flags.get() {
            return flags;
        }
        // SAFETY: the running command's context.
        let flags = unsafe { raw::RedisModule_GetContextFlags.unwrap()(self.ctx) };
        let flags = ContextFlags(flags as u32);
        self.flags.set(Some(flags));
        flags
    }

    /// The server's context of the call, for the rest of the FFI layer.
    pub(crate) fn ctx(&self) -> *mut raw::RedisModuleCtx {
        self.ctx
    }

    /// Propagates the call itself, as it came: what an internal command that is already
    /// deterministic sends on, and what a write whose effect nothing would receive sends to
    /// count the change (the server drops it at once, but counts it for `save` points).
    pub fn replicate_verbatim(&self) {
        // SAFETY: the running command's context.
        unsafe { raw::RedisModule_ReplicateVerbatim.unwrap()(self.ctx) };
    }
}

/// What a command's body replies when it succeeds.
pub enum Reply {
    /// A limiter's answer.
    Limiter(LimiterReply),
    /// 1 or 0: whether a lease was held (`RL.RELEASE`, `RL.RENEW`).
    Held(bool),
    /// Integers, counted nowhere (the internal commands, the counts).
    Integers(Integers),
    /// `+OK`.
    Ok,
    /// `RL.TOP`'s keys: `[key, refusals, error]` each.
    Top(Vec<Estimate>),
}

/// Up to five integers, as an array.
pub struct Integers {
    values: [i64; 5],
    len: usize,
}

impl Integers {
    /// The first five of `values`, at most.
    pub fn of(values: &[i64]) -> Integers {
        let len = values.len().min(5);
        let mut all = [0; 5];
        all[..len].copy_from_slice(&values[..len]);
        Integers { values: all, len }
    }
}

/// A limiter command's answer to a client.
pub struct LimiterReply {
    /// `[limited, limit, remaining, retry_after, reset_after]`.
    pub fields: [i64; 5],
    /// The sixth integer some calls add (a lease id, a wait, a quantity granted).
    pub extra: Option<i64>,
    /// Each limiter's own five integers, in key order, when asked for (`DETAILS`).
    pub details: Option<Box<Details>>,
    /// How the call ended, for the command's counters.
    pub outcome: Outcome,
}

/// Each limiter's own reply, in key order.
pub struct Details {
    /// The replies; the first `len` are used.
    pub fields: [[i64; 5]; MAX_LIMITERS],
    /// How many limiters.
    pub len: usize,
}

impl Reply {
    /// How the call ended, for the command's counters.
    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            Reply::Limiter(reply) => reply.outcome,
            Reply::Held(true) | Reply::Integers(_) | Reply::Ok | Reply::Top(_) => Outcome::Allowed,
            Reply::Held(false) => Outcome::Limited,
        }
    }

    /// Sends the reply, in the running command's context `ctx`.
    pub(crate) fn send(self, ctx: *mut raw::RedisModuleCtx) {
        // SAFETY: the running command's context; every function was checked at load.
        unsafe {
            let array = raw::RedisModule_ReplyWithArray.unwrap();
            let integer = raw::RedisModule_ReplyWithLongLong.unwrap();
            match self {
                Reply::Limiter(reply) => {
                    let extra = usize::from(reply.extra.is_some());
                    let details = reply.details.as_ref().map_or(0, |details| details.len);
                    array(ctx, (5 + extra + details) as _);
                    for value in reply.fields.into_iter().chain(reply.extra) {
                        integer(ctx, value);
                    }
                    if let Some(details) = &reply.details {
                        for fields in &details.fields[..details.len] {
                            array(ctx, 5);
                            for value in fields {
                                integer(ctx, *value);
                            }
                        }
                    }
                }
                Reply::Held(held) => {
                    integer(ctx, i64::from(held));
                }
                Reply::Integers(integers) => {
                    let values = &integers.values[..integers.len];
                    array(ctx, values.len() as _);
                    for value in values {
                        integer(ctx, *value);
                    }
                }
                Reply::Ok => {
                    raw::RedisModule_ReplyWithSimpleString.unwrap()(ctx, c"OK".as_ptr());
                }
                Reply::Top(estimates) => {
                    array(ctx, estimates.len() as _);
                    for estimate in &estimates {
                        array(ctx, 3);
                        raw::RedisModule_ReplyWithStringBuffer.unwrap()(
                            ctx,
                            estimate.key.as_ptr().cast(),
                            estimate.key.len(),
                        );
                        integer(ctx, estimate.count as i64);
                        integer(ctx, estimate.error as i64);
                    }
                }
            }
        }
    }
}
