//! The flow shared by the limiters whose state is a short string (`CL.THROTTLE`,
//! `RL.WINDOW`): open the key, read the state, let the core decide, store what it wrote.

use std::cell::RefCell;

use crate::core::verdict::Verdict;
use crate::error::CommandError;
use crate::redis::handler::Invocation;
use crate::redis::key::{Access, LimiterKey};

thread_local! {
    /// The new state of the running call. Commands run on Redis' main thread one at a time,
    /// so one buffer, kept warm, serves every call without allocating.
    static NEW_STATE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// What a core decided for one call.
pub struct Decision {
    /// The reply, before rounding.
    pub verdict: Verdict,
    /// `Some(expiry)` when the core wrote a new state to the buffer it was given: the key
    /// is then stored with it and expires at this Unix time in milliseconds.
    pub expire_at_ms: Option<i64>,
}

/// Runs `decide` on the call's key, opened for `access`. `is_state_length`
/// filters the string lengths the command's state can have; any other value is
/// `WRONGTYPE` without being read. `decide` gets the stored value (`None` for a missing key)
/// and an empty buffer for the new state.
pub fn decide_on_string_key(
    call: &Invocation,
    access: Access,
    is_state_length: fn(usize) -> bool,
    decide: impl FnOnce(Option<&[u8]>, &mut Vec<u8>) -> Result<Decision, CommandError>,
) -> Result<Verdict, CommandError> {
    let mut key = LimiterKey::open(call, call.key_name(), access)?;
    NEW_STATE.with_borrow_mut(|new_state| {
        new_state.clear();
        let decision = decide(key.read(is_state_length)?, new_state)?;
        if let Some(expire_at_ms) = decision.expire_at_ms {
            key.write(new_state, expire_at_ms)?;
        }
        Ok(decision.verdict)
    })
}
