//! `RL.DEBUG.PANIC key`: fault injection for the tests, registered only when the module is
//! loaded with the argument `debug-commands`. It panics while holding the key open, to show
//! on a live server that the guard turns any panic into an error reply, closes the key and
//! keeps the server running.

use crate::core::engine::Store;
use crate::error::CommandError;
use crate::redis::call::{Invocation, Reply};
use crate::redis::handler::{callback, Registered};
use crate::redis::metadata::{Arg, ArgKind, CommandSpec, Keys, Mode, KEY_READ_ONLY};
use crate::redis::store::RedisStore;

/// The module argument that registers the commands of this file.
pub const ENABLING_ARGUMENT: &str = "debug-commands";

/// `RL.DEBUG.PANIC`.
pub struct Panic;

impl Registered for Panic {
    const SPEC: &'static CommandSpec = &PANIC_SPEC;
}

/// The command's registration.
pub static PANIC_SPEC: CommandSpec = CommandSpec {
    name: c"rl.debug.panic",
    handler: callback::<Panic>,
    body: panic_holding_the_key,
    mode: Mode::ReadOnly,
    flags: c"readonly fast",
    arity: 2,
    summary: c"Panics inside the module (fault injection for tests)",
    complexity: c"O(1)",
    since: c"0.1.0",
    acl_categories: c"read fast",
    in_module_category: false,
    keys: Keys::One(KEY_READ_ONLY),
    args: &[Arg::new(c"key", ArgKind::Key)],
    event: c"rl.debug.panic",
    stats: None,
};

fn panic_holding_the_key(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let store = RedisStore::single(call, false);
    let _key = store.open(0, false)?;
    panic!("RL.DEBUG.PANIC was called");
}
