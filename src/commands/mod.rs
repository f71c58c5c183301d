//! The commands: each parses its arguments into limiters and a request ([`crate::options`])
//! and hands them to the engine through the server's store ([`crate::redis::store`]). Every
//! limiter command comes as a writing command and a read-only `_RO` variant, which share one
//! body. No unsafe code and no call into the module API lives here.

#![forbid(unsafe_code)]

pub mod all;
pub mod apply;
pub mod counts;
pub mod debug;
mod grammar;
pub mod lease;
mod limiting;
pub mod load;
pub mod log;
pub mod throttle;
pub mod top;
pub mod window;

use crate::redis::handler::Table;
use crate::redis::registration::{Arg, ArgKind, Command, Mode, KEY_INSERT};

use self::grammar::{without_refund, UNIT_ARG};

/// The module's commands, for the FFI layer ([`Table`]).
pub struct Commands;

impl Table for Commands {
    const COMMANDS: &'static [Command] = &TABLE;
}

/// Every command the module registers, one entry each: its name, flags, ACL categories,
/// arity, keys, arguments, documentation, body and whether `INFO` counts it (in this order,
/// for the counted ones). Adding a command is an entry here and its body.
pub static TABLE: [Command; 26] = [
    Command::limiter(c"cl.throttle", Mode::Write, throttle::throttle)
        .arity(-throttle::REQUIRED_ARGUMENTS)
        .args(throttle::ARGS)
        .docs(throttle::SUMMARY, c"O(1)", c"0.1.0"),
    Command::limiter(c"cl.throttle_ro", Mode::ReadOnly, throttle::throttle)
        .arity(-throttle::REQUIRED_ARGUMENTS)
        .args(without_refund(throttle::ARGS))
        .docs(c"The reply CL.THROTTLE would give, without writing anything", c"O(1)", c"0.2.0"),
    Command::limiter(c"rl.window", Mode::Write, window::window)
        .arity(-window::REQUIRED_ARGUMENTS)
        .args(window::ARGS)
        .docs(
            c"Rate-limits a key with a fixed window, a sliding-window counter or a rolling window of buckets",
            window::COMPLEXITY,
            c"0.1.0",
        ),
    Command::limiter(c"rl.window_ro", Mode::ReadOnly, window::window)
        .arity(-window::REQUIRED_ARGUMENTS)
        .args(without_refund(window::ARGS))
        .docs(c"The reply RL.WINDOW would give, without writing anything", window::COMPLEXITY, c"0.2.0"),
    Command::limiter(c"rl.log", Mode::Write, log::log)
        .arity(-log::REQUIRED_ARGUMENTS)
        .args(log::ARGS)
        .docs(
            c"Rate-limits a key with an exact sliding log of the requests it admitted",
            c"O(1) amortised",
            c"0.1.0",
        ),
    Command::limiter(c"rl.log_ro", Mode::ReadOnly, log::log)
        .arity(-log::REQUIRED_ARGUMENTS)
        .args(without_refund(log::ARGS))
        .docs(c"The reply RL.LOG would give, without writing anything", c"O(1) amortised", c"0.2.0"),
    Command::limiter(c"rl.all", Mode::Write, all::all)
        .counted_keys()
        .arity(-all::REQUIRED_ARGUMENTS)
        .args(all::ARGS)
        .docs(
            c"Checks a request against several limiters at once: charged to all if all admit it, to none otherwise",
            all::COMPLEXITY,
            c"0.2.0",
        ),
    Command::limiter(c"rl.all_ro", Mode::ReadOnly, all::all)
        .counted_keys()
        .arity(-all::REQUIRED_ARGUMENTS)
        .args(without_refund(all::ARGS))
        .docs(c"The reply RL.ALL would give, without writing anything", all::COMPLEXITY, c"0.2.0"),
    Command::limiter(c"rl.acquire", Mode::Write, lease::acquire)
        .arity(-4)
        .args(lease::ACQUIRE_ARGS)
        .docs(
            c"Takes slots of a concurrency limit for a lease that ends on its own",
            lease::ACQUIRE_COMPLEXITY,
            c"0.2.0",
        ),
    Command::limiter(c"rl.acquire_ro", Mode::ReadOnly, lease::acquire)
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
        ),
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
        ),
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
        ),
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
        .not_counted(),
    Command::limiter(c"rl.load.policy", Mode::Write, load::policy)
        .flags(c"write", c"write slow")
        .arity(-2)
        .args(load::POLICY_ARGS)
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
    Command::reader(c"rl.top", top::top)
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

#[cfg(test)]
mod usage_tests {
    //! A malformed call names its command's usage, rendered from the arguments `COMMAND DOCS`
    //! gives ([`crate::redis::registration::usage`]): these are the lines users read.

    use super::*;

    #[test]
    fn each_usage_is_rendered_from_its_arguments() {
        let expected = [
            "CL.THROTTLE key max_burst count period [quantity] [S|MS|US] [WARMUP period] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]",
            "RL.WINDOW key limit window [quantity] [S|MS|US] [FIXED|SLIDING|BUCKETS n|ANCHORED] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]",
            "RL.LOG key limit window [quantity] [S|MS|US] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]",
            "RL.ALL numkeys key [key ...] THROTTLE max_burst count period [WARMUP period] | WINDOW limit window [FIXED|SLIDING|BUCKETS n|ANCHORED] | LOG limit window | LEASE limit lease | LOAD priority [...] [quantity] [S|MS|US] [DETAILS] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]",
            "RL.ACQUIRE key limit lease [quantity] [S|MS|US]",
            "RL.RENEW key id lease [S|MS|US]",
            "RL.WINDOW.COUNTS key window [FIXED|SLIDING|ANCHORED] [S|MS|US]",
            "RL.LOG.COUNTS key window [S|MS|US]",
            "RL.LOAD.REPORT key instance ttl factor value [factor value ...]",
            "RL.LOAD.POLICY key [DEFAULT | [HYSTERESIS share] [HOLD ms] [RETRY ms] [ADMISSION threshold aggression min_requests max_rejection] [BBR factor threshold] [FACTOR name MAX|MEAN|SUM [FACTOR name MAX|MEAN|SUM ...]] LEVEL factor threshold [factor threshold ...] SHARES critical_plus critical sheddable_plus sheddable [LEVEL factor threshold [factor threshold ...] SHARES critical_plus critical sheddable_plus sheddable ...]]",
            "RL.DEBUG.FAIL EXPIRE|DELETE",
        ];
        for line in expected {
            let name = line.split(' ').next().unwrap();
            let (index, command) = TABLE
                .iter()
                .enumerate()
                .find(|(_, command)| command.name.to_str().unwrap().eq_ignore_ascii_case(name))
                .unwrap();
            let error = command.syntax_error(index).to_str().unwrap();
            assert_eq!(error, format!("ERR syntax error. Usage: {line}"));
        }
    }

    /// The sources of the command files, for their documented grammars.
    const SOURCES: [(&str, &str); 10] = [
        ("all.rs", include_str!("all.rs")),
        ("apply.rs", include_str!("apply.rs")),
        ("counts.rs", include_str!("counts.rs")),
        ("debug.rs", include_str!("debug.rs")),
        ("lease.rs", include_str!("lease.rs")),
        ("load.rs", include_str!("load.rs")),
        ("log.rs", include_str!("log.rs")),
        ("throttle.rs", include_str!("throttle.rs")),
        ("top.rs", include_str!("top.rs")),
        ("window.rs", include_str!("window.rs")),
    ];

    /// A grammar as written, compared without regard to spacing (`S | MS` is `S|MS`).
    fn normal(text: &str) -> String {
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        words
            .replace(" | ", "|")
            .replace("| ", "|")
            .replace(" |", "|")
    }

    /// Each command file's module documentation opens each command it defines with its
    /// grammar, `` `NAME args` `` (at the start of a line or a list item): that grammar is the
    /// usage line rendered from the table, so that the documentation cannot drift from it.
    #[test]
    fn every_documented_grammar_is_the_rendered_usage() {
        let mut documented = 0;
        let mut drifted = Vec::new();
        for (file, source) in SOURCES {
            let docs: Vec<&str> = source
                .lines()
                .take_while(|line| line.starts_with("//!"))
                .map(|line| line.trim_start_matches("//!").trim())
                .collect();
            let text = docs.join("\n");
            for (at, _) in text.match_indices('`') {
                let opens_item =
                    text[..at].ends_with('\n') || text[..at].ends_with("- ") || at == 0;
                let Some(end) = text[at + 1..].find('`') else {
                    break;
                };
                let grammar = &text[at + 1..at + 1 + end];
                let name = grammar.split_whitespace().next().unwrap_or("");
                let command = TABLE
                    .iter()
                    .find(|c| c.name.to_str().unwrap().eq_ignore_ascii_case(name));
                if !opens_item || command.is_none() || !grammar.contains(' ') {
                    continue;
                }
                let rendered = command.unwrap().usage_line();
                if normal(grammar) != normal(&rendered) {
                    drifted.push(format!("{file}: `{grammar}`, rendered `{rendered}`"));
                }
                documented += 1;
            }
        }
        assert!(drifted.is_empty(), "drifted:\n{}", drifted.join("\n"));
        assert!(documented >= 15, "{documented} grammars documented");
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
