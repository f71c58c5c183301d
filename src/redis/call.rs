//! One call of a command, as the commands see it: its arguments as bytes, its keys, its
//! context flags, what it propagates as itself, and the reply it gives.

use std::cell::Cell;
use std::ffi::CStr;

use redis_module::raw;

use crate::core::engine::MAX_LIMITERS;
use crate::core::top::Estimate;
use crate::redis::api::{self, Ctx, ServerStr};

/// How a call ended: each outcome is one counter of its command in `INFO`, named by
/// [`Outcome::counter`], in the order declared here (the ones added later last, so that a
/// parser of the earlier line reads the same fields). An option with a counter of its own
/// names its outcome in its declaration (`commands::grammar::OPTIONS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted at once and counted whole (a quantity of 1 or more).
    Allowed,
    /// Refused: over the limit, or a quantity above it.
    Limited,
    /// A quantity of 0: answered without counting.
    Peek,
    /// `REFUND`: a quantity given back.
    Refund,
    /// An error reply from the module (arguments, `WRONGTYPE`, an internal error). Errors
    /// Redis gives before the module runs (arity, ACL, `OOM`, `READONLY`, `MOVED`) are in
    /// `INFO commandstats` as `rejected_calls` instead.
    Error,
    /// Admitted after a wait (`DELAY`).
    Delayed,
    /// Admitted in part (`AT_MOST`).
    AtMost,
    /// Admitted beyond what fit now, the rest forced (`FORCE`).
    Forced,
    /// Shed by load: the service's level did not admit the request's priority.
    Shed,
}

impl Outcome {
    /// Every outcome, in `INFO`'s order.
    pub const ALL: [Outcome; 9] = [
        Outcome::Allowed,
        Outcome::Limited,
        Outcome::Peek,
        Outcome::Refund,
        Outcome::Error,
        Outcome::Delayed,
        Outcome::AtMost,
        Outcome::Forced,
        Outcome::Shed,
    ];

    /// Its counter's name in `INFO`.
    pub fn counter(self) -> &'static CStr {
        match self {
            Outcome::Allowed => c"allowed",
            Outcome::Limited => c"limited",
            Outcome::Peek => c"peeks",
            Outcome::Refund => c"refunds",
            Outcome::Error => c"errors",
            Outcome::Delayed => c"delayed",
            Outcome::AtMost => c"partial",
            Outcome::Forced => c"forced",
            Outcome::Shed => c"shed",
        }
    }
}

/// A key named by a call: one of its arguments, as the server passed it.
pub type KeyName<'a> = ServerStr<'a>;

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
    ctx: Ctx<'a>,
    /// The keyspace event its writes fire: the name of the command clients call.
    pub event: &'static CStr,
    /// The arguments as the server's strings, the command's name first.
    argv: &'a [ServerStr<'a>],
    /// The same arguments as bytes; the command's name, and the key of a single-key
    /// command, are left empty: they are only ever used as the server's strings.
    pub args: &'a [&'a [u8]],
    /// The context flags, once read.
    flags: Cell<Option<ContextFlags>>,
}

impl<'a> Invocation<'a> {
    /// The call the server made in `ctx` with `argv`, also read as `args`, whose writes fire
    /// `event`.
    pub fn new(
        ctx: Ctx<'a>,
        event: &'static CStr,
        argv: &'a [ServerStr<'a>],
        args: &'a [&'a [u8]],
    ) -> Invocation<'a> {
        Invocation {
            ctx,
            event,
            argv,
            args,
            flags: Cell::new(None),
        }
    }

    /// Argument `index` (0 is the command's name) as a key name.
    pub fn key(&self, index: usize) -> KeyName<'a> {
        self.argv[index]
    }

    /// Argument `index` as bytes, the key `args` leaves empty included.
    pub fn arg_bytes(&self, index: usize) -> &'a [u8] {
        self.argv[index].bytes()
    }

    /// The call's context flags, read once however many keys the call opens: they do not
    /// change during a call.
    pub fn context_flags(&self) -> ContextFlags {
        if let Some(flags) = self.flags.get() {
            return flags;
        }
        let flags = ContextFlags(api::context_flags(self.ctx));
        self.flags.set(Some(flags));
        flags
    }

    /// Whether the user running the call may run `argv` (a command and its arguments), by
    /// the server's ACL. A call with no user (from a master, the AOF) may.
    pub fn caller_may_run(&self, argv: &[&[u8]]) -> bool {
        if self.context_flags().is_from_master_or_aof() {
            return true;
        }
        api::CallerUser::of(self.ctx).is_some_and(|user| user.may_run(argv))
    }

    /// The server's context of the call, for the rest of the FFI layer.
    pub(crate) fn ctx(&self) -> Ctx<'a> {
        self.ctx
    }

    /// Propagates the call itself, as it came: what an internal command that is already
    /// deterministic sends on, and what a write whose effect nothing would receive sends to
    /// count the change (the server drops it at once, but counts it for `save` points).
    pub fn replicate_verbatim(&self) {
        api::replicate_verbatim(self.ctx);
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
    /// An array of items of any kind (`RL.LOAD.*`).
    Items(Vec<Item>),
}

/// One element of a reply of items.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// An integer.
    Integer(i64),
    /// A number that is not whole, as a bulk string of its shortest decimal form (`0.695`,
    /// where the server's own double reply writes `0.69499999999999995`), the same in RESP2
    /// and RESP3.
    Double(f64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// A nested array.
    Array(Vec<Item>),
}

impl Item {
    fn send(&self, ctx: Ctx<'_>) {
        match self {
            Item::Integer(value) => api::reply_with_long_long(ctx, *value),
            Item::Double(value) => {
                api::reply_with_string_buffer(ctx, format!("{value}").as_bytes())
            }
            Item::Bulk(bytes) => api::reply_with_string_buffer(ctx, bytes),
            Item::Array(items) => {
                api::reply_with_array(ctx, items.len());
                for item in items {
                    item.send(ctx);
                }
            }
        }
    }
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
    /// With a load gate, the last integer: the level that shed the request, 0 if none did.
    pub load: Option<i64>,
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
            Reply::Held(true)
            | Reply::Integers(_)
            | Reply::Ok
            | Reply::Top(_)
            | Reply::Items(_) => Outcome::Allowed,
            Reply::Held(false) => Outcome::Limited,
        }
    }

    /// Sends the reply, in the running command's context `ctx`.
    pub(crate) fn send(self, ctx: Ctx<'_>) {
        let integers = |values: &[i64]| {
            for value in values {
                api::reply_with_long_long(ctx, *value);
            }
        };
        match self {
            Reply::Limiter(reply) => {
                let extra = usize::from(reply.extra.is_some()) + usize::from(reply.load.is_some());
                let details = reply.details.as_ref().map_or(0, |details| details.len);
                api::reply_with_array(ctx, 5 + extra + details);
                integers(&reply.fields);
                integers(reply.extra.as_slice());
                integers(reply.load.as_slice());
                if let Some(details) = &reply.details {
                    for fields in &details.fields[..details.len] {
                        api::reply_with_array(ctx, 5);
                        integers(fields);
                    }
                }
            }
            Reply::Held(held) => api::reply_with_long_long(ctx, i64::from(held)),
            Reply::Integers(values) => {
                let values = &values.values[..values.len];
                api::reply_with_array(ctx, values.len());
                integers(values);
            }
            Reply::Ok => api::reply_with_simple_string(ctx, c"OK"),
            Reply::Items(items) => Item::Array(items).send(ctx),
            Reply::Top(estimates) => {
                api::reply_with_array(ctx, estimates.len());
                for estimate in &estimates {
                    api::reply_with_array(ctx, 3);
                    api::reply_with_string_buffer(ctx, &estimate.key);
                    integers(&[estimate.count as i64, estimate.error as i64]);
                }
            }
        }
    }
}
