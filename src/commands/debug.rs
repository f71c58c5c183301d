//! `RL.DEBUG.PANIC key`: fault injection for the tests, registered only when the module is
//! loaded with the argument `debug-commands` (`crate::redis::load::DEBUG_ARGUMENT`). It panics while holding the key open, to show
//! on a live server that the guard turns any panic into an error reply, closes the key and
//! keeps the server running.

use crate::core::engine::Store;
use crate::error::CommandError;
use crate::redis::call::{Invocation, Reply};
use crate::redis::metadata::Mode;
use crate::redis::store::RedisStore;

pub(super) fn panic_holding_the_key(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let store = RedisStore::single(call, false);
    let _key = store.open(0, false)?;
    panic!("RL.DEBUG.PANIC was called");
}
