//! Fault injection for the tests, registered only when the module is loaded with the argument
//! `debug-commands` (`crate::redis::startup::DEBUG_ARGUMENT`):
//!
//! - `RL.DEBUG.PANIC key` panics while holding the key open, to show on a live server that
//!   the guard turns any panic into an error reply, closes the key and keeps the server
//!   running;
//! - `RL.DEBUG.FAIL EXPIRE | DELETE` makes the next expiry set, or the next deletion, of a
//!   key fail as if the server refused it, to show that such a failure leaves the master and
//!   its replicas alike.

use crate::core::engine::Store;
use crate::error::CommandError;
use crate::redis::call::{Invocation, Reply};
use crate::redis::key::{self, FailNext};
use crate::redis::registration::Mode;
use crate::redis::store::RedisStore;

pub(super) fn panic_holding_the_key(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let store = RedisStore::single(call, false);
    let _key = store.open(0, false)?;
    panic!("RL.DEBUG.PANIC was called");
}

pub(super) fn fail_next(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let fail = match call.args.get(1).copied().unwrap_or_default() {
        word if word.eq_ignore_ascii_case(b"EXPIRE") => FailNext::Expiry,
        word if word.eq_ignore_ascii_case(b"DELETE") => FailNext::Delete,
        _ => return Err(CommandError::Syntax),
    };
    key::fail_next(fail);
    Ok(Reply::Ok)
}
