//! What every limiter command does with a call once its limiters are read: the request
//! its options make (and the combinations a lease or a load gate refuses), the seed of its
//! draws, how it ended and its sixth field; and the whole path of a single-limiter command.

use std::ffi::CStr;

use crate::core::engine::{Call, Settled};
use crate::core::limiter::Limiter;
use crate::core::params;
use crate::core::request::{Action, Request, Shortfall};
use crate::core::time::{Micros, Rounding, Unit};
use crate::core::verdict::Verdict;
use crate::error::CommandError;
use crate::options::CommonOptions;
use crate::redis::call::{Invocation, LimiterReply, Outcome, Reply};
use crate::redis::clock;
use crate::redis::registration::Mode;
use crate::redis::store;

use super::top;

/// What a call in `mode` asks of `limiters`, from its options: a read-only variant never
/// gives back, a `FORCE` charges each limiter at most 16 times its limit, and a lease is
/// taken whole, now, or not at all.
pub(super) fn request(
    options: &CommonOptions,
    mode: Mode,
    limiters: &[Limiter],
) -> Result<Request, CommandError> {
    if mode == Mode::ReadOnly && options.refund {
        return Err(CommandError::Message(
            c"ERR REFUND is not allowed in a read-only dry run (the _RO variants never write)",
        ));
    }
    if limiters
        .iter()
        .any(|limiter| matches!(limiter, Limiter::Lease(_)))
    {
        lease_options(options)?;
    }
    if limiters
        .iter()
        .any(|limiter| matches!(limiter, Limiter::Load(_)))
    {
        load_options(options)?;
    }
    let request = options.request();
    if request.shortfall == Shortfall::Force {
        for limiter in limiters {
            params::force_quantity(request.quantity, limiter.limit())?;
        }
    }
    Ok(request)
}

/// The options a call with a `LEASE` limiter refuses, each named.
fn lease_options(options: &CommonOptions) -> Result<(), CommandError> {
    let refuse = |message: &'static CStr| Err(CommandError::Message(message));
    match options.shortfall {
        Shortfall::Delay(_) => {
            return refuse(c"ERR LEASE and DELAY cannot be combined: a lease is taken now or not at all, so wait for RL.RELEASE and retry")
        }
        Shortfall::AtMost => {
            return refuse(c"ERR LEASE and AT_MOST cannot be combined: a lease holds the slots it asks for or none")
        }
        Shortfall::Force => {
            return refuse(c"ERR LEASE and FORCE cannot be combined: a lease never holds more slots than its limit")
        }
        Shortfall::Refuse => {}
    }
    if options.refund {
        return refuse(
            c"ERR LEASE and REFUND cannot be combined: give a lease back with RL.RELEASE key id",
        );
    }
    if options.block.is_some() {
        return refuse(c"ERR LEASE and BLOCK cannot be combined: a lease is refused only while its slots are held");
    }
    Ok(())
}

/// The options a call with a `LOAD` gate refuses, each named: a request shed by load is
/// not waited out, cut or forced.
fn load_options(options: &CommonOptions) -> Result<(), CommandError> {
    match options.shortfall {
        Shortfall::Delay(_) => Err(CommandError::Message(
            c"ERR LOAD and DELAY cannot be combined: a request shed by load retries after retry_after",
        )),
        Shortfall::AtMost => Err(CommandError::Message(
            c"ERR LOAD and AT_MOST cannot be combined: the load gate admits a request or sheds it",
        )),
        Shortfall::Force => Err(CommandError::Message(
            c"ERR LOAD and FORCE cannot be combined: a request shed by load is never forced",
        )),
        Shortfall::Refuse => Ok(()),
    }
}

/// How a call of `request` ended, given the reply's `limited` and what the engine settled,
/// for the counters.
pub(super) fn outcome(request: &Request, limited: bool, settled: &Settled) -> Outcome {
    match (request.action, request.quantity, limited) {
        (Action::Refund, _, _) => Outcome::Refund,
        (Action::Take, 0, _) => Outcome::Peek,
        (Action::Take, _, true) => Outcome::Limited,
        (Action::Take, quantity, false) => match request.shortfall {
            Shortfall::Delay(_) if settled.wait > Micros::ZERO => Outcome::Delayed,
            Shortfall::AtMost if settled.granted < quantity => Outcome::AtMost,
            Shortfall::Force if settled.forced => Outcome::Forced,
            _ => Outcome::Allowed,
        },
    }
}

/// The sixth integer of a reply: with a lease, its id (0 when refused, peeked or dry-run);
/// with `DELAY`, the wait before going ahead (in `unit`s, rounded up; 0 at once or when
/// refused); with `AT_MOST`, the quantity granted.
pub(super) fn sixth_field(
    limiters: &[Limiter],
    request: &Request,
    settled: &Settled,
    unit: Unit,
) -> Option<i64> {
    if limiters
        .iter()
        .any(|limiter| matches!(limiter, Limiter::Lease(_)))
    {
        return Some(settled.lease_id.unwrap_or(0) as i64);
    }
    match (request.action, request.shortfall) {
        (Action::Take, Shortfall::Delay(_)) => {
            Some(settled.wait.ticks().in_units(unit, Rounding::Up))
        }
        (Action::Take, Shortfall::AtMost) => Some(settled.granted as i64),
        _ => None,
    }
}

/// The seed a call's lease id and load draw come from: a value no client can predict when
/// the call names a lease or a load gate (the server's keyed generator,
/// [`crate::redis::random`]), 0 otherwise (no draw for the rest).
pub(super) fn call_seed(limiters: &[Limiter]) -> u64 {
    let draws = |limiter: &Limiter| matches!(limiter, Limiter::Lease(_) | Limiter::Load(_));
    if limiters.iter().any(draws) {
        crate::redis::random::next()
    } else {
        0
    }
}

/// Runs a single-limiter command: `limiter` on the call's key, replied with `rounding`.
pub(super) fn one_limiter(
    call: &Invocation,
    limiter: Limiter,
    options: &CommonOptions,
    mode: Mode,
    rounding: Rounding,
) -> Result<Reply, CommandError> {
    let request = request(options, mode, std::slice::from_ref(&limiter))?;
    let engine_call = Call {
        limiters: std::slice::from_ref(&limiter),
        request,
        now: clock::now(),
        write: mode == Mode::Write,
        seed: call_seed(std::slice::from_ref(&limiter)),
    };
    let mut verdict = [Verdict::default()];
    let settled = store::decide_on_keys::<1>(call, 1, &engine_call, &mut verdict)?;
    let outcome = outcome(&request, verdict[0].limited, &settled);
    if outcome == Outcome::Limited && mode == Mode::Write {
        top::record_refusals(call, 1, std::iter::once(true), engine_call.now);
    }
    Ok(Reply::Limiter(LimiterReply {
        fields: verdict[0].to_reply(options.unit, rounding),
        extra: sixth_field(
            std::slice::from_ref(&limiter),
            &request,
            &settled,
            options.unit,
        ),
        load: None,
        details: None,
        outcome,
    }))
}
