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
pub mod load;
pub mod log;
pub mod throttle;
pub mod top;
pub mod window;

use std::ffi::CStr;

use crate::args::CommonOptions;
use crate::core::engine::{Call, Settled};
use crate::core::limiter::Limiter;
use crate::core::params;
use crate::core::request::{Action, Request, Shortfall};
use crate::core::time::{Micros, Rounding, Unit};
use crate::core::verdict::Verdict;
use crate::error::CommandError;
use crate::redis::call::{Invocation, LimiterReply, Outcome, Reply};
use crate::redis::clock;
use crate::redis::handler::Table;
use crate::redis::metadata::{Arg, ArgKind, Command, Mode, KEY_INSERT};
use crate::redis::store;

/// The module's commands, for the FFI layer ([`Table`]).
pub struct Commands;

impl Table for Commands {
    const COMMANDS: &'static [Command] = &TABLE;
}

/// Every command the module registers, one entry each: its name, flags, ACL categories,
/// arity, keys, arguments, documentation, body and whether `INFO` counts it (in this order,
/// for the counted ones). Adding a command is an entry here and its body.
pub static TABLE: [Command; 26] = [
    Command::limiter(c"cl.throttle", Mode::Write, throttle::run)
        .arity(-throttle::REQUIRED_ARGUMENTS)
        .args(throttle::ARGS)
        .docs(throttle::SUMMARY, c"O(1)", c"0.1.0")
        .usage(throttle::USAGE),
    Command::limiter(c"cl.throttle_ro", Mode::ReadOnly, throttle::run)
        .arity(-throttle::REQUIRED_ARGUMENTS)
        .args(without_refund(throttle::ARGS))
        .docs(c"The reply CL.THROTTLE would give, without writing anything", c"O(1)", c"0.2.0"),
    Command::limiter(c"rl.window", Mode::Write, window::run)
        .arity(-window::REQUIRED_ARGUMENTS)
        .args(window::ARGS)
        .docs(
            c"Rate-limits a key with a fixed window, a sliding-window counter or a rolling window of buckets",
            window::COMPLEXITY,
            c"0.1.0",
        )
        .usage(window::USAGE),
    Command::limiter(c"rl.window_ro", Mode::ReadOnly, window::run)
        .arity(-window::REQUIRED_ARGUMENTS)
        .args(without_refund(window::ARGS))
        .docs(c"The reply RL.WINDOW would give, without writing anything", window::COMPLEXITY, c"0.2.0"),
    Command::limiter(c"rl.log", Mode::Write, log::run)
        .arity(-log::REQUIRED_ARGUMENTS)
        .args(log::ARGS)
        .docs(
            c"Rate-limits a key with an exact sliding log of the requests it admitted",
            c"O(1) amortised",
            c"0.1.0",
        )
        .usage(log::USAGE),
    Command::limiter(c"rl.log_ro", Mode::ReadOnly, log::run)
        .arity(-log::REQUIRED_ARGUMENTS)
        .args(without_refund(log::ARGS))
        .docs(c"The reply RL.LOG would give, without writing anything", c"O(1) amortised", c"0.2.0"),
    Command::limiter(c"rl.all", Mode::Write, all::run)
        .counted_keys()
        .arity(-all::REQUIRED_ARGUMENTS)
        .args(all::ARGS)
        .docs(
            c"Checks a request against several limiters at once: charged to all if all admit it, to none otherwise",
            all::COMPLEXITY,
            c"0.2.0",
        )
        .usage(all::USAGE),
    Command::limiter(c"rl.all_ro", Mode::ReadOnly, all::run)
        .counted_keys()
        .arity(-all::REQUIRED_ARGUMENTS)
        .args(without_refund(all::ARGS))
        .docs(c"The reply RL.ALL would give, without writing anything", all::COMPLEXITY, c"0.2.0"),
    Command::limiter(c"rl.acquire", Mode::Write, lease::run_acquire)
        .arity(-4)
        .args(lease::ACQUIRE_ARGS)
        .docs(
            c"Takes slots of a concurrency limit for a lease that ends on its own",
            lease::ACQUIRE_COMPLEXITY,
            c"0.2.0",
        )
        .usage(lease::ACQUIRE_USAGE),
    Command::limiter(c"rl.acquire_ro", Mode::ReadOnly, lease::run_acquire)
        .arity(-4)
        .args(lease::ACQUIRE_ARGS)
        .docs(c"The reply RL.ACQUIRE would give, without writing anything", lease::ACQUIRE_COMPLEXITY, c"0.2.0"),
    // `allowed` counts replies of 1, `limited` replies of 0.
    Command::limiter(c"rl.release", Mode::Write, lease::release)
        .arity(3)
        .args(&[
            Arg::new(c"key", ArgKind::Key),
            Arg::new(c"id", ArgKind::Integer),
        ])
        .docs(
            c"Frees a lease taken by RL.ACQUIRE at once",
            c"O(N) for N leases held",
            c"0.2.0",
        ),
    Command::limiter(c"rl.renew", Mode::Write, lease::renew)
        .arity(-4)
        .args(&[
            Arg::new(c"key", ArgKind::Key),
            Arg::new(c"id", ArgKind::Integer),
            Arg::new(c"lease", ArgKind::Integer),
            UNIT_ARG,
        ])
        .docs(
            c"Extends a lease taken by RL.ACQUIRE to a new duration from now",
            c"O(N) for N leases held",
            c"0.2.0",
        )
        .usage(lease::RENEW_USAGE),
    Command::reader(c"rl.window.counts", counts::window_counts)
        .arity(-3)
        .args(&[
            Arg::new(c"key", ArgKind::Key),
            Arg::new(c"window", ArgKind::Integer),
            Arg::one_of(
                c"algorithm",
                &[
                    Arg::token(c"FIXED"),
                    Arg::token(c"SLIDING"),
                    Arg::token(c"ANCHORED"),
                ],
            )
            .optional(),
            UNIT_ARG,
        ])
        .docs(
            c"The counts of a FIXED, SLIDING or ANCHORED window and how long they last, without writing",
            c"O(1)",
            c"0.3.0",
        )
        .usage(counts::WINDOW_USAGE),
    Command::reader(c"rl.log.counts", counts::log_counts)
        .arity(-3)
        .args(&[
            Arg::new(c"key", ArgKind::Key),
            Arg::new(c"window", ArgKind::Integer),
            UNIT_ARG,
        ])
        .docs(
            c"The units an RL.LOG key counts and when its oldest and newest entries leave, without writing",
            c"O(1)",
            c"0.3.0",
        )
        .usage(counts::LOG_USAGE),
    Command::limiter(c"rl.load.report", Mode::Write, load::report)
        .flags(c"write", c"write slow")
        .arity(-5)
        .args(&[
            Arg::new(c"key", ArgKind::Key),
            Arg::new(c"instance", ArgKind::String),
            Arg::new(c"ttl", ArgKind::Integer),
            Arg::block(
                c"pair",
                &[
                    Arg::new(c"factor", ArgKind::String),
                    Arg::new(c"value", ArgKind::String),
                ],
            )
            .multiple(),
        ])
        .docs(
            c"Reports an instance's load factors for its service; replies the level and the share admitted per priority",
            c"O(N) for N instances reporting",
            c"0.3.0",
        )
        .not_counted()
        .usage(load::REPORT_USAGE),
    Command::limiter(c"rl.load.policy", Mode::Write, load::policy)
        .flags(c"write", c"write slow")
        .arity(-2)
        .args(&[
            Arg::new(c"key", ArgKind::Key),
            Arg::new(c"policy", ArgKind::String).multiple().optional(),
        ])
        .docs(
            c"Sets a service's load levels, thresholds and shares (or the default), or replies them",
            c"O(N) for N instances reporting",
            c"0.3.0",
        )
        .not_counted(),
    Command::reader(c"rl.load.status", load::status)
        .flags(c"readonly", c"read slow")
        .arity(2)
        .args(&[Arg::new(c"key", ArgKind::Key)])
        .docs(
            c"A service's load level, since when, its instances, shares and factors",
            c"O(N) for N instances reporting",
            c"0.3.0",
        ),
    Command::reader(c"rl.top", top::run)
        .no_keys()
        .flags(c"readonly", c"read slow")
        .arity(-1)
        .args(&[Arg::new(c"count", ArgKind::Integer).optional()])
        .docs(
            c"The keys this server refused most over the current and the previous minute",
            c"O(count)",
            c"0.3.0",
        ),
    Command::admin(c"rl.top.reset", top::reset)
        .arity(1)
        .docs(
            c"Forgets the refusals RL.TOP counted on this server (admin only)",
            c"O(N) where N is the number of keys kept (the module argument top-keys)",
            c"0.3.0",
        ),
    Command::internal(c"rl.log.apply", apply::log_apply, apply::LOG_EVENT)
        .arity(3)
        .args(apply::PACKED_ARGS)
        .docs(
            c"Internal: applies a log's change as the master decided it (replication and AOF only)",
            c"O(1) amortised",
            c"0.3.0",
        ),
    Command::internal(c"rl.lease.apply", apply::lease_apply, apply::LEASE_EVENT)
        .arity(-3)
        .args(apply::FIELDS_ARGS)
        .docs(
            c"Internal: applies a lease change with the master's time and id (replication and AOF only)",
            lease::ACQUIRE_COMPLEXITY,
            c"0.2.0",
        ),
    // Not `fast`: a chunk holds up to 1,024 entries.
    Command::internal(c"rl.log.loadchunk", apply::log_load_chunk, apply::LOG_EVENT)
        .flags(c"write", c"write slow")
        .key_flags(KEY_INSERT)
        .arity(-3)
        .args(&[
            Arg::new(c"key", ArgKind::Key),
            Arg::new(c"entries", ArgKind::String),
            Arg::new(c"until_us", ArgKind::Integer)
                .after_token(c"BLOCKED")
                .optional(),
        ])
        .docs(
            c"Internal: appends serialized entries to a log (AOF rewrite only)",
            c"O(N) for N entries",
            c"0.1.0",
        ),
    Command::internal(c"rl.lease.loadchunk", apply::lease_load_chunk, apply::LEASE_EVENT)
        .flags(c"write", c"write slow")
        .key_flags(KEY_INSERT)
        .arity(4)
        .args(&[
            Arg::new(c"key", ArgKind::Key),
            Arg::new(c"next_id", ArgKind::Integer),
            Arg::new(c"leases", ArgKind::String),
        ])
        .docs(
            c"Internal: appends serialized leases to a lease set (AOF rewrite only)",
            c"O(N) for N leases",
            c"0.2.0",
        ),
    // `limit,window_us,quantity,now_us[,option]` packed in one argument (0.2), or the same
    // fields as separate arguments (0.1).
    Command::internal(c"rl.log.replay", apply::log_replay, apply::LOG_EVENT)
        .arity(-3)
        .args(apply::FIELDS_ARGS)
        .docs(
            c"Internal: an RL.LOG call with the master's time, as releases before 0.3 propagated it (replication and AOF only)",
            c"O(1) amortised",
            c"0.1.0",
        ),
    Command::reader(c"rl.debug.panic", debug::panic_holding_the_key)
        .debug()
        .arity(2)
        .args(&[Arg::new(c"key", ArgKind::Key)])
        .docs(
            c"Panics inside the module (fault injection for tests)",
            c"O(1)",
            c"0.1.0",
        ),
    Command::admin(c"rl.debug.fail", debug::fail_next)
        .debug()
        .arity(2)
        .args(&[Arg::one_of(
            c"write",
            &[Arg::token(c"EXPIRE"), Arg::token(c"DELETE")],
        )])
        .docs(
            c"Makes the next expiry set or deletion of a key fail (fault injection for tests)",
            c"O(1)",
            c"0.3.0",
        ),
];

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

/// `REFUND`: last in every argument list, so that a read-only variant's list is the same
/// without it.
const REFUND_ARG: Arg = Arg::token(c"REFUND").optional();

/// A writing command's arguments, without `REFUND`: its read-only variant's.
const fn without_refund(args: &'static [Arg]) -> &'static [Arg] {
    args.split_at(args.len() - 1).0
}

/// The reply to an internal command from an ordinary client.
const INTERNAL_ONLY: CommandError =
    CommandError::Message(c"ERR internal command: only a master or the AOF sends it");

/// Refuses the internal commands from ordinary clients: they are accepted only from a
/// master's replication stream (or a slot migration's) or while loading, and, for the
/// tests' forged effects, from any client of a server loaded with `debug-commands`.
fn internal_only(call: &Invocation) -> Result<(), CommandError> {
    if call.context_flags().is_from_master_or_aof() || crate::redis::load::debug_commands() {
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
fn outcome(request: &Request, limited: bool, settled: &Settled) -> Outcome {
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

/// The seed a call's lease id and load draw come from: a value no client can predict when
/// the call names a lease or a load gate (the server's keyed generator,
/// [`crate::redis::random`]), 0 otherwise (no draw for the rest).
fn call_seed(limiters: &[Limiter]) -> u64 {
    let draws = |limiter: &Limiter| matches!(limiter, Limiter::Lease(_) | Limiter::Load(_));
    if limiters.iter().any(draws) {
        crate::redis::random::next()
    } else {
        0
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
        seed: call_seed(std::slice::from_ref(&limiter)),
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
        load: None,
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
        let mut checked = 0;
        for command in TABLE.iter() {
            let Some(error) = command.usage else {
                continue;
            };
            let name = command.name.to_str().unwrap().to_uppercase();
            let rendered = format!("{name} {}", render(command.args));
            assert_eq!(usage(error), rendered, "{name}");
            checked += 1;
        }
        assert_eq!(
            checked, 9,
            "every writing command with options names its usage"
        );
    }

    #[test]
    fn names_are_unique_and_counted_commands_are_the_ones_clients_call() {
        let mut names: Vec<&str> = TABLE.iter().map(|c| c.name.to_str().unwrap()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TABLE.len());
        for command in &TABLE {
            let name = command.name.to_str().unwrap();
            let internal = name.contains(".apply")
                || name.contains("loadchunk")
                || name.contains(".replay")
                || name.contains(".debug.");
            assert!(!(internal && command.in_module_category), "{name}");
            assert!(!(internal && command.counted), "{name}");
        }
    }
}
