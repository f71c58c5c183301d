//! The commands: each parses its arguments into limiters and a request ([`crate::args`])
//! and hands them to the engine through the server's store ([`crate::redis::store`]). Every
//! limiter command comes as a writing command and a read-only `_RO` variant, which share one
//! body. No unsafe code and no call into the module API lives here.

#![forbid(unsafe_code)]

pub mod all;
pub mod apply;
pub mod counts;
pub mod debug;
pub mod lease;
pub mod log;
pub mod throttle;
pub mod top;
pub mod window;

use std::ffi::{c_int, CStr};

use crate::args::CommonOptions;
use crate::core::engine::{Call, Settled};
use crate::core::limiter::Limiter;
use crate::core::params;
use crate::core::request::{Action, Request, Shortfall};
use crate::core::time::{Micros, Rounding, Unit};
use crate::core::verdict::Verdict;
use crate::error::CommandError;
use crate::redis::call::{Invocation, LimiterReply, Reply};
use crate::redis::clock;
use crate::redis::metadata::{
    Arg, ArgKind, Body, CommandSpec, Handler, Keys, Mode, KEY_READ_ONLY, KEY_READ_WRITE,
};
use crate::redis::stats::{CommandStats, Outcome};
use crate::redis::store;

/// Every command the module registers.
pub static ALL: [&CommandSpec; 20] = [
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
    &counts::WINDOW_COUNTS_SPEC,
    &counts::LOG_COUNTS_SPEC,
    &apply::LOG_APPLY_SPEC,
    &apply::LEASE_APPLY_SPEC,
    &apply::LOG_LOAD_CHUNK_SPEC,
    &apply::LEASE_LOAD_CHUNK_SPEC,
    &apply::LOG_REPLAY_SPEC,
    &top::SPEC,
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
    body: Body,
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
    // `store::writable`), so that peeks answer over `maxmemory`. Counted keys are told to
    // the server per call (`getkeys-api`): the key spec alone is not what Cluster routing
    // and `CROSSSLOT` checks read.
    let (flags, acl_categories, key_flags) = match (mode, counted_keys) {
        (Mode::Write, false) => (c"write fast", c"write fast", KEY_READ_WRITE),
        (Mode::Write, true) => (c"write fast getkeys-api", c"write fast", KEY_READ_WRITE),
        (Mode::ReadOnly, false) => (c"readonly fast", c"read fast", KEY_READ_ONLY),
        (Mode::ReadOnly, true) => (c"readonly fast getkeys-api", c"read fast", KEY_READ_ONLY),
    };
    CommandSpec {
        name,
        handler,
        body,
        mode,
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
/// What a take that does not fit now does instead of being refused.
const SHORTFALL_ARG: Arg = Arg::one_of(
    c"shortfall",
    &[
        Arg::new(c"max_wait", ArgKind::Integer).after_token(c"DELAY"),
        Arg::token(c"AT_MOST"),
        Arg::token(c"FORCE"),
    ],
)
.optional();

const REFUND_ARG: Arg = Arg::token(c"REFUND").optional();

/// A writing command's arguments, without `REFUND`: its read-only variant's.
const fn without_refund(args: &'static [Arg]) -> &'static [Arg] {
    args.split_at(args.len() - 1).0
}

/// The reply to an internal command from an ordinary client.
const INTERNAL_ONLY: CommandError =
    CommandError::Message(c"ERR internal command: only a master or the AOF sends it");

/// Refuses the internal commands from ordinary clients: they are accepted only from a
/// master's replication stream (or a slot migration's) or while loading.
fn internal_only(call: &Invocation) -> Result<(), CommandError> {
    if call.context_flags().is_from_master_or_aof() {
        Ok(())
    } else {
        Err(INTERNAL_ONLY)
    }
}

/// What a call in `mode` asks of `limiters`, from its options: a read-only variant never
/// gives back, a `FORCE` charges each limiter at most 16 times its limit, and a lease is
/// taken whole, now, or not at all.
fn request(
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

/// How a call of `request` ended, given the reply's `limited` and what the engine settled,
/// for the counters.
fn outcome(request: &Request, limited: bool, settled: &Settled) -> Outcome {
    match (request.action, request.quantity, limited) {
        (Action::Refund, _, _) => Outcome::Refund,
        (Action::Take, 0, _) => Outcome::Peek,
        (Action::Take, _, true) => Outcome::Limited,
        (Action::Take, quantity, false) => match request.shortfall {
            Shortfall::Delay(_) if settled.wait > Micros(0) => Outcome::Delayed,
            Shortfall::AtMost if settled.granted < quantity => Outcome::AtMost,
            Shortfall::Force if settled.forced => Outcome::Forced,
            _ => Outcome::Allowed,
        },
    }
}

/// The sixth integer of a reply: with a lease, its id (0 when refused, peeked or dry-run);
/// with `DELAY`, the wait before going ahead (in `unit`s, rounded up; 0 at once or when
/// refused); with `AT_MOST`, the quantity granted.
fn sixth_field(
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

/// Runs a single-limiter command: `limiter` on the call's key, replied with `rounding`.
fn single(
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
    };
    let mut verdict = [Verdict::default()];
    let settled = store::run::<1>(call, 1, &engine_call, &mut verdict)?;
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
        details: None,
        outcome,
    }))
}

#[cfg(test)]
mod usage_tests {
    //! Each command's grammar is written twice: its arguments for `COMMAND DOCS` (`ARGS`) and
    //! the usage its syntax error names. These must agree: the usage is rendered from the
    //! arguments here, as `COMMAND DOCS` readers see them.

    use super::*;
    use crate::redis::metadata::ArgKind;

    /// `args` as a usage line: optional parts in brackets, alternatives joined by `|` (` | `
    /// between blocks), a keyword before its value, a repeated part followed by `[... ...]`.
    fn render(args: &[Arg]) -> String {
        let words: Vec<String> = args.iter().map(render_one).collect();
        words.join(" ")
    }

    fn render_one(arg: &Arg) -> String {
        let name = arg.name.to_str().unwrap();
        let token = arg.token.map(|token| token.to_str().unwrap());
        let mut text = match (arg.kind, token) {
            (ArgKind::PureToken, Some(token)) => token.to_owned(),
            (ArgKind::OneOf, _) => {
                let blocks = arg
                    .subargs
                    .iter()
                    .any(|sub| matches!(sub.kind, ArgKind::Block));
                let parts: Vec<String> = arg.subargs.iter().map(render_one).collect();
                parts.join(if blocks { " | " } else { "|" })
            }
            (ArgKind::Block, _) => render(arg.subargs),
            (_, Some(token)) => format!("{token} {name}"),
            (_, None) => name.to_owned(),
        };
        if arg.multiple {
            text = match arg.kind {
                ArgKind::OneOf => format!("{text} [...]"),
                _ => format!("{text} [{text} ...]"),
            };
        }
        if arg.optional {
            text = format!("[{text}]");
        }
        text
    }

    fn usage(error: CommandError) -> &'static str {
        let CommandError::Message(message) = error else {
            unreachable!()
        };
        message
            .to_str()
            .unwrap()
            .strip_prefix("ERR syntax error. Usage: ")
            .unwrap()
    }

    #[test]
    fn each_usage_is_its_arguments() {
        let cases: [(CommandError, &CommandSpec); 8] = [
            (throttle::USAGE, &throttle::SPEC),
            (window::USAGE, &window::SPEC),
            (log::USAGE, &log::SPEC),
            (all::USAGE, &all::SPEC),
            (lease::ACQUIRE_USAGE, &lease::ACQUIRE_SPEC),
            (lease::RENEW_USAGE, &lease::RENEW_SPEC),
            (counts::WINDOW_USAGE, &counts::WINDOW_COUNTS_SPEC),
            (counts::LOG_USAGE, &counts::LOG_COUNTS_SPEC),
        ];
        for (error, spec) in cases {
            let name = spec.name.to_str().unwrap().to_uppercase();
            let rendered = format!("{name} {}", render(spec.args));
            assert_eq!(usage(error), rendered, "{name}");
        }
    }
}
