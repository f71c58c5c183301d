//! `RL.DEBUG.PANIC key`: fault injection for the tests, registered only when the module is
//! loaded with the argument `debug-commands`. It panics while holding the key open, to show
//! on a live server that the guard turns any panic into an error reply, closes the key and
//! keeps Redis running.

use redis_module::raw;

use crate::error::CommandError;
use crate::redis::handler::{self, Invocation};
use crate::redis::key::{Access, LimiterKey};
use crate::redis::metadata::{Arg, ArgKind, CommandSpec, Keys};

/// The module argument that registers the commands of this file.
pub const ENABLING_ARGUMENT: &str = "debug-commands";

/// The command's registration.
pub static PANIC_SPEC: CommandSpec = CommandSpec {
    name: c"rl.debug.panic",
    handler: rl_debug_panic,
    flags: c"readonly fast",
    arity: 2,
    summary: c"Panics inside the module (fault injection for tests)",
    complexity: c"O(1)",
    since: c"0.1.0",
    acl_categories: c"read fast",
    in_module_category: false,
    keys: Keys::One(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS),
    args: &[Arg::new(c"key", ArgKind::Key)],
    event: c"rl.debug.panic",
    stats: None,
};

handler::command_callback!(rl_debug_panic, PANIC_SPEC, panic_holding_the_key);

fn panic_holding_the_key(call: &Invocation) -> Result<[i64; 5], CommandError> {
    let _key = LimiterKey::open(call, call.key_name(), Access::Read)?;
    panic!("RL.DEBUG.PANIC was called");
}
