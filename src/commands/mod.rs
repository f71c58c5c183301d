//! The commands: each parses its arguments, opens its key, runs its core and replies,
//! through the shared layers in `crate::args` and `crate::redis`.

pub mod debug;
pub mod log;
pub mod throttle;
pub mod window;

use crate::args::CommonOptions;
use crate::core::time::Rounding;
use crate::core::verdict::Verdict;
use crate::core::window::{WindowError, MAX_BUCKETS};
use crate::error::CommandError;
use crate::redis::handler::LimiterReply;
use crate::redis::metadata::{Arg, CommandSpec};
use crate::redis::stats::CommandStats;

/// Every command the module registers.
pub static ALL: [&CommandSpec; 5] = [
    &throttle::SPEC,
    &window::SPEC,
    &log::SPEC,
    &log::REPLAY_SPEC,
    &log::LOAD_CHUNK_SPEC,
];

/// The counters `INFO ratelimit` shows, one per command clients call.
pub static STATS: [&CommandStats; 3] = [&throttle::STATS, &window::STATS, &log::STATS];

/// The reply to a client's request, with times in the request's unit.
fn limiter_reply(verdict: Verdict, options: &CommonOptions, rounding: Rounding) -> LimiterReply {
    LimiterReply {
        fields: verdict.to_reply(options.unit, rounding),
        peek: options.quantity == 0,
    }
}

/// The flags of the commands clients call: `write` (they may write their key), `fast`. Not
/// `deny-oom`: the module refuses only the calls that would write (see `LimiterKey::open`).
const LIMITER_FLAGS: &std::ffi::CStr = c"write fast";

/// Their ACL categories (beside the module's own, where the server has it).
const LIMITER_ACL_CATEGORIES: &std::ffi::CStr = c"write fast";

/// Their key spec: the key is read and may be rewritten.
const LIMITER_KEY_FLAGS: u32 = redis_module::raw::REDISMODULE_CMD_KEY_RW
    | redis_module::raw::REDISMODULE_CMD_KEY_ACCESS
    | redis_module::raw::REDISMODULE_CMD_KEY_UPDATE;

/// The unit keyword all commands accept, for `COMMAND DOCS`.
const UNIT_ARG: Arg = Arg::one_of(
    c"unit",
    &[Arg::token(c"S"), Arg::token(c"MS"), Arg::token(c"US")],
)
.optional();

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
