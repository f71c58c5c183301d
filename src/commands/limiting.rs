//! What every limiter command does with a call once its limiters are read: the request
//! its options make (refusing what its variant and limiters cannot take), the seed of its
//! draws and its sixth field; and the whole path of a single-limiter command.
use crate::core::engine::{Call, Settled};
use crate::core::limiter::Limiter;
use crate::core::request::Request;
use crate::core::time::Rounding;
use crate::core::verdict::Verdict;
use crate::error::CommandError;
use crate::redis::call::{Invocation, LimiterReply, Outcome, Reply};
use crate::redis::clock;
use crate::redis::registration::Mode;
use crate::redis::store;

use super::grammar::{CommonOptions, Refuser};
use super::top;

/// What a call in `mode` asks of `limiters`, from its options: the options the call's
/// variant and limiters refuse are refused as [`super::grammar::OPTIONS`] declares, and the
/// request is checked against each limiter (a `FORCE` charges each at most 16 times its
/// limit).
#[inline]
pub(super) fn request(
    options: &CommonOptions,
    mode: Mode,
    limiters: &[Limiter],
) -> Result<Request, CommandError> {
    if !options.given.is_empty() {
        let lease = limiters
            .iter()
            .any(|limiter| matches!(limiter, Limiter::Lease(_)));
        let load = limiters
            .iter()
            .any(|limiter| matches!(limiter, Limiter::Load(_)));
        options.refuse(|refuser| match refuser {
            Refuser::ReadOnly => mode == Mode::ReadOnly,
            Refuser::Lease => lease,
            Refuser::Load => load,
            Refuser::Acquire => false,
        })?;
        options.check(limiters)?;
    }
    Ok(options.request)
}

/// The sixth integer of a reply: with a lease, its id (0 when refused, peeked or dry-run);
/// else the field a given option fills (`DELAY`'s wait, `AT_MOST`'s grant), in the call's
/// unit.
pub(super) fn sixth_field(
    limiters: &[Limiter],
    options: &CommonOptions,
    settled: &Settled,
) -> Option<i64> {
    if limiters
        .iter()
        .any(|limiter| matches!(limiter, Limiter::Lease(_)))
    {
        return Some(settled.lease_id.unwrap_or(0) as i64);
    }
    options.sixth_field(settled)
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
    let outcome = options.outcome(verdict[0].limited, &settled);
    if outcome == Outcome::Limited && mode == Mode::Write {
        top::record_refusals(call, 1, std::iter::once(true), engine_call.now);
    }
    Ok(Reply::Limiter(LimiterReply {
        fields: verdict[0].to_reply(options.unit, rounding),
        extra: sixth_field(std::slice::from_ref(&limiter), options, &settled),
        load: None,
        details: None,
        outcome,
    }))
}
