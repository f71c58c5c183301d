//! What the module tells the tools people already use: `INFO ratelimit` counters per
//! command, and `COMMAND DOCS`, from which redis-cli builds `help` and its argument hints.

mod support;

use std::collections::HashMap;

use redis::{Connection, Value};
use support::{error, ints, query, Server};

/// The module's `INFO` lines, `field -> {counter -> value}`.
fn counters(con: &mut Connection, section: &str) -> HashMap<String, HashMap<String, u64>> {
    let info: String = query(con, &["INFO", section]);
    info.lines()
        .filter_map(|line| line.strip_prefix("ratelimit_"))
        .map(|line| {
            let (command, values) = line.trim().split_once(':').unwrap();
            let values = values
                .split(',')
                .map(|pair| {
                    let (name, value) = pair.split_once('=').unwrap();
                    (name.to_owned(), value.parse().unwrap())
                })
                .collect();
            (command.to_owned(), values)
        })
        .collect()
}

/// The counters of one line: calls, allowed, limited, peeks, refunds, errors.
/// The commands clients call, each with its line in `INFO`.
const COMMANDS: [&str; 12] = [
    "cl.throttle",
    "cl.throttle_ro",
    "rl.window",
    "rl.window_ro",
    "rl.log",
    "rl.log_ro",
    "rl.all",
    "rl.all_ro",
    "rl.acquire",
    "rl.acquire_ro",
    "rl.release",
    "rl.renew",
];

/// The counters of one command; those of the options (delayed, partial, forced) are counted
/// by tests/shortfall.rs, and zero here.
fn expected(counts: [u64; 6]) -> HashMap<String, u64> {
    let [calls, allowed, limited, peeks, refunds, errors] = counts;
    [
        ("calls", calls),
        ("allowed", allowed),
        ("limited", limited),
        ("peeks", peeks),
        ("refunds", refunds),
        ("errors", errors),
        ("delayed", 0),
        ("partial", 0),
        ("forced", 0),
        ("shed", 0),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

#[test]
fn info_counts_each_commands_calls_by_outcome() {
    let server = Server::start();
    let mut con = server.connect();
    let before = counters(&mut con, "ratelimit");
    for command in COMMANDS {
        assert_eq!(before[command], expected([0; 6]), "{command}");
    }

    // CL.THROTTLE: 2 admitted, 1 refused, 1 oversized (refused), 1 peek, 2 errors.
    for _ in 0..3 {
        ints(&mut con, &["CL.THROTTLE", "t", "1", "1", "60"]);
    }
    ints(&mut con, &["CL.THROTTLE", "t", "1", "1", "60", "5"]);
    ints(&mut con, &["CL.THROTTLE", "t", "1", "1", "60", "0"]);
    error(&mut con, &["CL.THROTTLE", "t", "x", "1", "60"]);
    let _: () = query(&mut con, &["SET", "text", "hello"]);
    error(&mut con, &["CL.THROTTLE", "text", "1", "1", "60"]);
    // Refused by Redis before the module runs: not the module's error, but Redis' own
    // `rejected_calls`.
    error(&mut con, &["CL.THROTTLE", "t"]);

    // RL.WINDOW, in a transaction: 1 admitted, 1 refused.
    let _: () = query(&mut con, &["MULTI"]);
    for _ in 0..2 {
        let _: () = query(&mut con, &["RL.WINDOW", "w", "1", "60", "FIXED"]);
    }
    let _: Vec<Vec<i64>> = query(&mut con, &["EXEC"]);

    // RL.LOG: 1 admitted, 1 peek, 1 refund, 1 error.
    ints(&mut con, &["RL.LOG", "l", "5", "60"]);
    ints(&mut con, &["RL.LOG", "l", "5", "60", "0"]);
    ints(&mut con, &["RL.LOG", "l", "5", "60", "REFUND"]);
    error(&mut con, &["RL.LOG", "l", "0", "60"]);

    // RL.ALL: 1 admitted, 1 refused, 1 error; the read-only variants count apart.
    let all = [
        "RL.ALL", "2", "a1", "a2", "THROTTLE", "0", "1", "60", "LOG", "5", "60",
    ];
    ints(&mut con, &all);
    ints(&mut con, &all);
    error(
        &mut con,
        &[
            "RL.ALL", "2", "a1", "a1", "LOG", "5", "60", "LOG", "5", "60",
        ],
    );
    let mut all_ro = all;
    all_ro[0] = "RL.ALL_RO";
    ints(&mut con, &all_ro);
    ints(&mut con, &["CL.THROTTLE_RO", "t", "1", "1", "60", "0"]);
    ints(&mut con, &["RL.WINDOW_RO", "w", "1", "60", "FIXED"]);
    ints(&mut con, &["RL.LOG_RO", "l", "5", "60"]);

    // Leases: 1 admitted, 1 refused, 1 peek; RL.RELEASE and RL.RENEW count replies of 1 as
    // allowed and of 0 as limited.
    let id = ints(&mut con, &["RL.ACQUIRE", "p", "1", "60"])[5].to_string();
    ints(&mut con, &["RL.ACQUIRE", "p", "1", "60"]);
    ints(&mut con, &["RL.ACQUIRE", "p", "1", "60", "0"]);
    ints(&mut con, &["RL.ACQUIRE_RO", "p", "1", "60"]);
    let _: i64 = query(&mut con, &["RL.RENEW", "p", &id, "60"]);
    let _: i64 = query(&mut con, &["RL.RELEASE", "p", &id]);
    let _: i64 = query(&mut con, &["RL.RELEASE", "p", &id]);
    error(&mut con, &["RL.RELEASE", "p", "x"]);

    let after = counters(&mut con, "ratelimit");
    assert_eq!(after["cl.throttle"], expected([7, 2, 2, 1, 0, 2]));
    assert_eq!(after["rl.window"], expected([2, 1, 1, 0, 0, 0]));
    assert_eq!(after["rl.log"], expected([4, 1, 0, 1, 1, 1]));
    assert_eq!(after["rl.all"], expected([3, 1, 1, 0, 0, 1]));
    assert_eq!(after["rl.all_ro"], expected([1, 0, 1, 0, 0, 0]));
    assert_eq!(after["cl.throttle_ro"], expected([1, 0, 0, 1, 0, 0]));
    assert_eq!(after["rl.window_ro"], expected([1, 0, 1, 0, 0, 0]));
    assert_eq!(after["rl.log_ro"], expected([1, 1, 0, 0, 0, 0]));
    assert_eq!(after["rl.acquire"], expected([3, 1, 1, 1, 0, 0]));
    assert_eq!(after["rl.acquire_ro"], expected([1, 0, 1, 0, 0, 0]));
    assert_eq!(after["rl.renew"], expected([1, 1, 0, 0, 0, 0]));
    assert_eq!(after["rl.release"], expected([3, 1, 1, 0, 0, 1]));
    assert_eq!(after.len(), COMMANDS.len(), "{after:?}");
    // The same lines under `INFO modules` and `INFO everything`.
    assert_eq!(counters(&mut con, "modules"), after);
    assert_eq!(counters(&mut con, "everything"), after);
    let stats = server
        .info_field("commandstats", "cmdstat_cl.throttle")
        .unwrap();
    assert!(stats.contains("rejected_calls=1"), "{stats}");
}

#[test]
fn a_replica_counts_its_own_clients_not_the_masters() {
    let master = Server::start();
    let replica = Server::start_replica(&master);
    let mut con = master.connect();
    ints(&mut con, &["RL.LOG", "l", "5", "60"]);
    ints(&mut con, &["CL.THROTTLE", "t", "1", "1", "60"]);
    support::wait_for_replicas(&mut con, 1);
    let on_replica = counters(&mut replica.connect(), "ratelimit");
    for command in COMMANDS {
        assert_eq!(on_replica[command], expected([0; 6]), "{command}");
    }
}

/// One argument of `COMMAND DOCS`: its name, type, token, flags, and its own arguments.
#[derive(Clone, Debug, PartialEq)]
struct DocArg {
    name: String,
    kind: String,
    token: Option<String>,
    flags: Vec<String>,
    arguments: Vec<DocArg>,
}

/// A RESP2 map (a flat array of names and values) as name -> value.
fn fields(value: &Value) -> HashMap<String, Value> {
    let Value::Array(items) = value else {
        panic!("not a map: {value:?}")
    };
    items
        .chunks(2)
        .map(|pair| {
            (
                redis::from_redis_value(pair[0].clone()).unwrap(),
                pair[1].clone(),
            )
        })
        .collect()
}

fn doc_args(value: &Value) -> Vec<DocArg> {
    let Value::Array(args) = value else {
        panic!("not an argument list: {value:?}")
    };
    args.iter()
        .map(|arg| {
            let arg = fields(arg);
            let text = |name: &str| {
                arg.get(name)
                    .map(|value| redis::from_redis_value::<String>(value.clone()).unwrap())
            };
            DocArg {
                name: text("name").unwrap(),
                kind: text("type").unwrap(),
                token: text("token"),
                flags: arg
                    .get("flags")
                    .map(|flags| redis::from_redis_value(flags.clone()).unwrap())
                    .unwrap_or_default(),
                arguments: arg.get("arguments").map(doc_args).unwrap_or_default(),
            }
        })
        .collect()
}

fn arg(name: &str, kind: &str) -> DocArg {
    DocArg {
        name: name.to_owned(),
        kind: kind.to_owned(),
        token: None,
        flags: vec![],
        arguments: vec![],
    }
}

fn optional(arg: DocArg) -> DocArg {
    DocArg {
        flags: vec!["optional".to_owned()],
        ..arg
    }
}

fn token(word: &str) -> DocArg {
    DocArg {
        token: Some(word.to_owned()),
        ..arg(word, "pure-token")
    }
}

fn one_of(name: &str, alternatives: Vec<DocArg>) -> DocArg {
    DocArg {
        arguments: alternatives,
        ..optional(arg(name, "oneof"))
    }
}

fn unit() -> DocArg {
    one_of("unit", vec![token("S"), token("MS"), token("US")])
}

fn multiple(arg: DocArg) -> DocArg {
    DocArg {
        flags: [arg.flags, vec!["multiple".to_owned()]].concat(),
        ..arg
    }
}

/// `[WARMUP period]`.
fn warmup() -> DocArg {
    optional(DocArg {
        token: Some("WARMUP".to_owned()),
        ..arg("period", "integer")
    })
}

fn block(name: &str, parts: Vec<DocArg>) -> DocArg {
    DocArg {
        arguments: parts,
        ..arg(name, "block")
    }
}

/// The options every limiter command ends with: `[BLOCK duration]`, one of `DELAY max_wait`,
/// `AT_MOST` and `FORCE`, then `[REFUND]` for the writing commands.
fn options(writing: bool) -> Vec<DocArg> {
    let mut options = vec![
        optional(DocArg {
            token: Some("BLOCK".to_owned()),
            ..arg("duration", "integer")
        }),
        optional(one_of(
            "shortfall",
            vec![
                DocArg {
                    token: Some("DELAY".to_owned()),
                    ..arg("max_wait", "integer")
                },
                token("AT_MOST"),
                token("FORCE"),
            ],
        )),
    ];
    if writing {
        options.push(optional(token("REFUND")));
    }
    options
}

#[test]
fn command_docs_describe_every_argument() {
    let server = Server::start();
    let mut con = server.connect();
    let buckets = || DocArg {
        token: Some("BUCKETS".to_owned()),
        ..arg("n", "integer")
    };
    let algorithm = || {
        one_of(
            "algorithm",
            vec![
                token("FIXED"),
                token("SLIDING"),
                buckets(),
                token("ANCHORED"),
            ],
        )
    };
    let throttle = |writing| {
        [
            vec![
                arg("key", "key"),
                arg("max_burst", "integer"),
                arg("count", "integer"),
                arg("period", "integer"),
                optional(arg("quantity", "integer")),
                unit(),
                warmup(),
            ],
            options(writing),
        ]
        .concat()
    };
    let window = |writing| {
        [
            vec![
                arg("key", "key"),
                arg("limit", "integer"),
                arg("window", "integer"),
                optional(arg("quantity", "integer")),
                unit(),
                algorithm(),
            ],
            options(writing),
        ]
        .concat()
    };
    let log = |writing| {
        [
            vec![
                arg("key", "key"),
                arg("limit", "integer"),
                arg("window", "integer"),
                optional(arg("quantity", "integer")),
                unit(),
            ],
            options(writing),
        ]
        .concat()
    };
    let all = |writing: bool| {
        let limiter = DocArg {
            flags: vec!["multiple".to_owned()],
            arguments: vec![
                block(
                    "throttle",
                    vec![
                        token("THROTTLE"),
                        arg("max_burst", "integer"),
                        arg("count", "integer"),
                        arg("period", "integer"),
                        warmup(),
                    ],
                ),
                block(
                    "window",
                    vec![
                        token("WINDOW"),
                        arg("limit", "integer"),
                        arg("window", "integer"),
                        algorithm(),
                    ],
                ),
                block(
                    "log",
                    vec![
                        token("LOG"),
                        arg("limit", "integer"),
                        arg("window", "integer"),
                    ],
                ),
                block(
                    "lease",
                    vec![
                        token("LEASE"),
                        arg("limit", "integer"),
                        arg("lease", "integer"),
                    ],
                ),
                block("load", vec![token("LOAD"), arg("priority", "string")]),
            ],
            ..arg("limiter", "oneof")
        };
        let mut args = vec![
            arg("numkeys", "integer"),
            multiple(arg("key", "key")),
            limiter,
            optional(arg("quantity", "integer")),
            unit(),
            optional(token("DETAILS")),
        ];
        args.extend(options(writing));
        args
    };
    let commands = [
        (
            "cl.throttle",
            "Rate-limits a key with GCRA (a leaky bucket), compatible with redis-cell",
            "O(1)",
            "0.1.0",
            throttle(true),
        ),
        (
            "cl.throttle_ro",
            "The reply CL.THROTTLE would give, without writing anything",
            "O(1)",
            "0.2.0",
            throttle(false),
        ),
        (
            "rl.window",
            "Rate-limits a key with a fixed window, a sliding-window counter or a rolling window of buckets",
            "O(1) for FIXED, SLIDING and ANCHORED, O(N) for BUCKETS N",
            "0.1.0",
            window(true),
        ),
        (
            "rl.window_ro",
            "The reply RL.WINDOW would give, without writing anything",
            "O(1) for FIXED, SLIDING and ANCHORED, O(N) for BUCKETS N",
            "0.2.0",
            window(false),
        ),
        (
            "rl.log",
            "Rate-limits a key with an exact sliding log of the requests it admitted",
            "O(1) amortised",
            "0.1.0",
            log(true),
        ),
        (
            "rl.log_ro",
            "The reply RL.LOG would give, without writing anything",
            "O(1) amortised",
            "0.2.0",
            log(false),
        ),
        (
            "rl.all",
            "Checks a request against several limiters at once: charged to all if all admit it, to none otherwise",
            "O(N) for N limiters (as each limiter's own command)",
            "0.2.0",
            all(true),
        ),
        (
            "rl.all_ro",
            "The reply RL.ALL would give, without writing anything",
            "O(N) for N limiters (as each limiter's own command)",
            "0.2.0",
            all(false),
        ),
    ];
    let acquire = || {
        vec![
            arg("key", "key"),
            arg("limit", "integer"),
            arg("lease", "integer"),
            optional(arg("quantity", "integer")),
            unit(),
        ]
    };
    let lease_complexity =
        "O(1) amortised when leases share a duration, O(N) for N leases held otherwise";
    let leases = [
        (
            "rl.acquire",
            "Takes slots of a concurrency limit for a lease that ends on its own",
            lease_complexity,
            "0.2.0",
            acquire(),
        ),
        (
            "rl.acquire_ro",
            "The reply RL.ACQUIRE would give, without writing anything",
            lease_complexity,
            "0.2.0",
            acquire(),
        ),
        (
            "rl.release",
            "Frees a lease taken by RL.ACQUIRE at once",
            "O(N) for N leases held",
            "0.2.0",
            vec![arg("key", "key"), arg("id", "integer")],
        ),
        (
            "rl.renew",
            "Extends a lease taken by RL.ACQUIRE to a new duration from now",
            "O(N) for N leases held",
            "0.2.0",
            vec![
                arg("key", "key"),
                arg("id", "integer"),
                arg("lease", "integer"),
                unit(),
            ],
        ),
        (
            "rl.top",
            "The keys this server refused most over the current and the previous minute",
            "O(count)",
            "0.3.0",
            vec![optional(arg("count", "integer"))],
        ),
        (
            "rl.top.reset",
            "Forgets the refusals RL.TOP counted on this server (admin only)",
            "O(N) where N is the number of keys kept (the module argument top-keys)",
            "0.3.0",
            vec![],
        ),
    ];
    for (name, summary, complexity, since, arguments) in commands.into_iter().chain(leases) {
        let docs: Vec<Value> = query(&mut con, &["COMMAND", "DOCS", name]);
        assert_eq!(docs.len(), 2, "{name}: {docs:?}");
        let doc = fields(&docs[1]);
        let text = |field: &str| -> String { redis::from_redis_value(doc[field].clone()).unwrap() };
        assert_eq!(text("summary"), summary, "{name}");
        assert_eq!(text("since"), since, "{name}");
        assert_eq!(text("group"), "module");
        assert_eq!(text("module"), "ratelimit");
        assert_eq!(text("complexity"), complexity, "{name}");
        assert_eq!(doc_args(&doc["arguments"]), arguments, "{name}");
    }
}
