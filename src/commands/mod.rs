//! The commands: each parses its arguments and hands its limiters to the shared engine
//! ([`crate::redis::engine`]), through the shared layers in `crate::args` and `crate::redis`.
//! Every limiter command comes as a writing command and a read-only `_RO` variant.

pub mod all;
pub mod debug;
pub mod lease;
pub mod log;
pub mod throttle;
pub mod window;

use std::ffi::{c_int, CStr};

use crate::args::CommonOptions;
use crate::core::limiter::Limiter;
use crate::core::request::Request;
use crate::core::time::Rounding;
use crate::core::window::{WindowError, MAX_BUCKETS};
use crate::error::CommandError;
use crate::redis::clock;
use crate::redis::engine::{self, LogEffect, Mode, Named};
use crate::redis::handler::{Invocation, LimiterReply};
use crate::redis::metadata::{Arg, ArgKind, CommandSpec, Handler, Keys};
use crate::redis::stats::CommandStats;

/// Every command the module registers.
pub static ALL: [&CommandSpec; 16] = [
    &throttle::SPEC,
    &throttle::SPEC_RO,
    &window::SPEC,
    &window::SPEC_RO,
    &log::SPEC,
    &log::SPEC_RO,
    &all::SPEC,
    &all::SPEC_RO,
    &lease::ACQUIRE_SPEC,
    &lease::ACQUIRE_RO_SPEC,
    &lease::RELEASE_SPEC,
    &lease::RENEW_SPEC,
    &log::REPLAY_SPEC,
    &log::LOAD_CHUNK_SPEC,
    &lease::APPLY_SPEC,
    &lease::LOAD_CHUNK_SPEC,
];

/// The counters `INFO ratelimit` shows, one per command clients call.
pub static STATS: [&CommandStats; 12] = [
    &throttle::STATS,
    &throttle::STATS_RO,
    &window::STATS,
    &window::STATS_RO,
    &log::STATS,
    &log::STATS_RO,
    &all::STATS,
    &all::STATS_RO,
    &lease::ACQUIRE_STATS,
    &lease::ACQUIRE_RO_STATS,
    &lease::RELEASE_STATS,
    &lease::RENEW_STATS,
];

/// The description of a limiter command, writing or read-only: what differs between the
/// two is derived from `mode`.
#[allow(clippy::too_many_arguments)] // One per field of the registration.
const fn limiter_spec(
    name: &'static CStr,
    handler: Handler,
    mode: Mode,
    arity: c_int,
    summary: &'static CStr,
    complexity: &'static CStr,
    since: &'static CStr,
    counted_keys: bool,
    args: &'static [Arg],
    stats: &'static CommandStats,
) -> CommandSpec {
    // Not `deny-oom`: the module refuses only the calls that would write (see
    // `LimiterKey::open`), so that peeks answer over `maxmemory`. Counted keys are told to
    // Redis per call (`getkeys-api`): the key spec alone is not what Cluster routing and
    // `CROSSSLOT` checks read.
    let (flags, acl_categories, key_flags) = match (mode, counted_keys) {
        (Mode::Write, false) => (c"write fast", c"write fast", WRITE_KEY_FLAGS),
        (Mode::Write, true) => (c"write fast getkeys-api", c"write fast", WRITE_KEY_FLAGS),
        (Mode::ReadOnly, false) => (c"readonly fast", c"read fast", READ_KEY_FLAGS),
        (Mode::ReadOnly, true) => (c"readonly fast getkeys-api", c"read fast", READ_KEY_FLAGS),
    };
    CommandSpec {
        name,
        handler,
        flags,
        arity,
        summary,
        complexity,
        since,
        acl_categories,
        in_module_category: true,
        keys: if counted_keys {
            Keys::Counted(key_flags)
        } else {
            Keys::One(key_flags)
        },
        args,
        event: name,
        stats: Some(stats),
    }
}

/// The key spec of a writing command: the key is read and may be rewritten.
const WRITE_KEY_FLAGS: u32 = redis_module::raw::REDISMODULE_CMD_KEY_RW
    | redis_module::raw::REDISMODULE_CMD_KEY_ACCESS
    | redis_module::raw::REDISMODULE_CMD_KEY_UPDATE;

/// The key spec of a read-only variant: the key is only read.
const READ_KEY_FLAGS: u32 =
    redis_module::raw::REDISMODULE_CMD_KEY_RO | redis_module::raw::REDISMODULE_CMD_KEY_ACCESS;

/// `quantity`, for `COMMAND DOCS`.
const QUANTITY_ARG: Arg = Arg::new(c"quantity", ArgKind::Integer).optional();

/// The unit keyword all commands accept.
const UNIT_ARG: Arg = Arg::one_of(
    c"unit",
    &[Arg::token(c"S"), Arg::token(c"MS"), Arg::token(c"US")],
)
.optional();

/// `BLOCK duration`.
const BLOCK_ARG: Arg = Arg::new(c"duration", ArgKind::Integer)
    .after_token(c"BLOCK")
    .optional();

/// `REFUND`: last in every argument list, so that a read-only variant's list is the same
/// without it.
const REFUND_ARG: Arg = Arg::token(c"REFUND").optional();

/// A writing command's arguments, without `REFUND`: its read-only variant's.
const fn without_refund(args: &'static [Arg]) -> &'static [Arg] {
    args.split_at(args.len() - 1).0
}

/// The reply to a `BUCKETS` count out of range.
const BUCKETS_RANGE: CommandError =
    CommandError::Message(c"ERR BUCKETS must be an integer from 1 to 3600");

const _: () = assert!(MAX_BUCKETS == 3_600, "BUCKETS_RANGE names the maximum");
const _: () = assert!(
    crate::core::log::MAX_LIMIT == 1_048_576,
    "window_error names RL.LOG's maximum limit"
);

/// The replies to window and limit parameters `RL.WINDOW` and `RL.LOG` refuse.
fn window_error(error: WindowError) -> CommandError {
    CommandError::Message(match error {
        WindowError::NonPositiveLimit => c"ERR limit must be positive",
        WindowError::NonPositiveWindow => c"ERR window must be positive",
        WindowError::WindowTooLong => {
            c"ERR window is too long: the limit is 2^63 nanoseconds (292 years)"
        }
        WindowError::WindowTooLongForBuckets => {
            c"ERR window is too long for BUCKETS: window * BUCKETS must stay below 2^63 microseconds"
        }
        WindowError::BucketsOutOfRange => return BUCKETS_RANGE,
        WindowError::BucketTooShort => c"ERR window / BUCKETS must be at least 1 microsecond",
        WindowError::LimitTooHighForLog => {
            c"ERR limit is too high for RL.LOG: at most 1048576 (RL.WINDOW and CL.THROTTLE take any limit)"
        }
    })
}

/// The reply to an internal command from an ordinary client.
const INTERNAL_ONLY: CommandError =
    CommandError::Message(c"ERR internal command: only a master or the AOF sends it");

/// Refuses the internal commands from ordinary clients: they are accepted only from a
/// master's replication stream or while loading.
fn internal_only(call: &Invocation) -> Result<(), CommandError> {
    let allowed = redis_module::raw::REDISMODULE_CTX_FLAGS_REPLICATED
        | redis_module::raw::REDISMODULE_CTX_FLAGS_LOADING;
    let flags = call.context_flags();
    if flags as u32 & allowed == 0 {
        return Err(INTERNAL_ONLY);
    }
    Ok(())
}

/// What a call in `mode` asks, from its options: a read-only variant never gives back.
fn request(options: &CommonOptions, mode: Mode) -> Result<Request, CommandError> {
    if mode == Mode::ReadOnly && options.refund {
        return Err(CommandError::Message(
            c"ERR REFUND is not allowed in a read-only dry run (the _RO variants never write)",
        ));
    }
    Ok(options.request())
}

/// Runs a single-limiter command: `limiter` on the call's key, replied with `rounding`.
#[inline(always)]
fn single(
    call: &Invocation,
    limiter: Limiter,
    options: &CommonOptions,
    mode: Mode,
    rounding: Rounding,
) -> Result<LimiterReply, CommandError> {
    let request = request(options, mode)?;
    let named = Named {
        key: call.key_name(),
        limiter,
    };
    let verdict = engine::run_one(
        call,
        &named,
        &request,
        mode,
        clock::now_micros(),
        LogEffect::Replay,
    )?;
    Ok(LimiterReply {
        fields: verdict.to_reply(options.unit, rounding),
        details: None,
        request,
    })
}
