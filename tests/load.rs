//! Graded limiting by load on a live server: reports set a service's level, a policy sets
//! what each level admits of each priority (changed online and seen by the next call), and
//! `RL.ALL ... LOAD` decides the load gate, the rate limits and a lease in one atomic call,
//! writing nothing for a request shed by load; bad input gets its error and changes nothing;
//! replicas hold what the master holds.

mod support;

use std::time::Duration;

use redis::{Connection, Value};
use support::{error, ints, query, snapshot, wait_for_replicas, wait_until, Server};

/// The items of an `RL.LOAD.*` reply, as text: integers and doubles alike.
fn items(con: &mut Connection, args: &[&str]) -> Vec<String> {
    let reply: Vec<Value> = query(con, args);
    reply.iter().map(text).collect()
}

fn text(value: &Value) -> String {
    match value {
        Value::Int(value) => value.to_string(),
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        Value::Double(value) => value.to_string(),
        Value::Array(items) => {
            format!("[{}]", items.iter().map(text).collect::<Vec<_>>().join(" "))
        }
        other => format!("{other:?}"),
    }
}

/// Two levels: cpu 0.5 sheds half of `sheddable`, cpu 0.8 sheds every `sheddable` and
/// `sheddable_plus` and half of `critical`; a second of retry; no hold, so that the tests
/// step levels at once.
const POLICY: [&str; 22] = [
    "HOLD",
    "0",
    "RETRY",
    "1000",
    "LEVEL",
    "cpu",
    "0.5",
    "SHARES",
    "1",
    "1",
    "1",
    "0.5",
    "LEVEL",
    "cpu",
    "0.8",
    "SHARES",
    "1",
    "0.5",
    "0",
    "0",
    "HYSTERESIS",
    "0",
];

fn set_policy(con: &mut Connection, key: &str) {
    let mut call = vec!["RL.LOAD.POLICY", key];
    call.extend_from_slice(&POLICY);
    assert_eq!(query::<String, _>(con, &call), "OK");
}

fn report(con: &mut Connection, key: &str, instance: &str, cpu: &str) -> Vec<String> {
    items(con, &["RL.LOAD.REPORT", key, instance, "60000", "cpu", cpu])
}

#[test]
fn reports_set_the_level_and_what_each_priority_is_admitted() {
    let server = Server::start();
    let mut con = server.connect();
    let memory = |con: &mut Connection, instance: &str, value: &str| {
        items(
            con,
            &["RL.LOAD.REPORT", "svc", instance, "60000", "memory", value],
        )
    };
    // The default policy: memory 0.9 is its first level's, the instance worst off counting.
    assert_eq!(memory(&mut con, "a", "0.5"), ["0", "1", "1", "1", "1", "1"]);
    assert_eq!(
        memory(&mut con, "b", "0.93"),
        ["1", "2", "1", "1", "1", "0.5"],
        "max 0.93"
    );
    assert_eq!(
        memory(&mut con, "a", "0.96"),
        ["2", "2", "1", "1", "0.5", "0"],
        "max 0.96"
    );
    // The CPU alone sets no level of the default policy, full as it may be.
    assert_eq!(
        report(&mut con, "cpu-bound", "a", "1"),
        ["0", "1", "1", "1", "1", "1"]
    );
    report(&mut con, "svc", "a", "0.92");
    // Without a policy the key lives as long as its last report.
    let ttl: i64 = query(&mut con, &["PTTL", "svc"]);
    // (The expiry is the report's end, rounded up to a whole millisecond.)
    assert!((1..=60_001).contains(&ttl), "{ttl}");
    // A policy set is configuration: kept with no expiry, and seen by the next call.
    set_policy(&mut con, "svc");
    assert_eq!(query::<i64, _>(&mut con, &["PTTL", "svc"]), -1);
    assert_eq!(
        report(&mut con, "svc", "b", "0.9"),
        ["2", "2", "1", "0.5", "0", "0"],
        "mean cpu 0.91"
    );
    let status = items(&mut con, &["RL.LOAD.STATUS", "svc"]);
    assert_eq!(&status[..2], ["level", "2"]);
    assert_eq!(
        &status[4..10],
        ["instances", "2", "shares", "[1 0.5 0 0]", "policy", "set"]
    );
    assert!(status[11].starts_with("[cpu 0.91"), "{status:?}");
    // The words that set it come back.
    let words: Vec<String> = query(&mut con, &["RL.LOAD.POLICY", "svc"]);
    assert!(
        words
            .join(" ")
            .contains("LEVEL cpu 0.5 SHARES 1 1 1 0.5 LEVEL cpu 0.8 SHARES 1 0.5 0 0"),
        "{words:?}"
    );
    // The default back: the key expires with its reports again.
    assert_eq!(
        query::<String, _>(&mut con, &["RL.LOAD.POLICY", "svc", "DEFAULT"]),
        "OK"
    );
    assert!(query::<i64, _>(&mut con, &["PTTL", "svc"]) > 0);
}

/// The reports that shed a healthy service before: a serial worker at half its CPU holding
/// two requests (`bbr` 4.86 from a pipe measured while idle), and a saturated one.
#[test]
fn the_default_policy_sheds_nothing_from_a_healthy_service() {
    let server = Server::start();
    let mut con = server.connect();
    let words =
        "RL.LOAD.REPORT svc w1 3000 cpu 0.47 inflight 2 latency 11.5 max_rps 96 min_rt 4.29";
    let call: Vec<&str> = words.split(' ').collect();
    assert_eq!(items(&mut con, &call), ["0", "1", "1", "1", "1", "1"]);
    let status = items(&mut con, &["RL.LOAD.STATUS", "svc"]);
    assert!(
        !status[11].contains("bbr"),
        "below the trigger, no bbr: {status:?}"
    );
    // Past the trigger (cpu 0.9) the same queue counts: 18 in flight over a pipe of 0.41
    // requests is 44, the default's third level.
    let words = "RL.LOAD.REPORT svc w1 3000 cpu 0.95 inflight 18 max_rps 96 min_rt 4.29";
    let call: Vec<&str> = words.split(' ').collect();
    assert_eq!(items(&mut con, &call), ["3", "1", "1", "0.5", "0", "0"]);
}

/// A policy's top level, left: one level a hold, never two at once, each class's share
/// only rising as the shares ease (the server's replies, whatever the machine's pace).
#[test]
fn a_level_is_left_one_step_at_a_time_and_its_shares_ease() {
    let server = Server::start();
    let mut con = server.connect();
    let policy = "RL.LOAD.POLICY svc HOLD 300 LEVEL cpu 0.5 SHARES 1 1 1 0.5 \
        LEVEL cpu 0.7 SHARES 1 1 0.5 0 LEVEL cpu 0.9 SHARES 1 0.5 0 0";
    let call: Vec<&str> = policy.split_whitespace().collect();
    assert_eq!(query::<String, _>(&mut con, &call), "OK");
    assert_eq!(report(&mut con, "svc", "a", "0.99")[0], "3");
    let mut seen: Vec<(u8, [f64; 4])> = Vec::new();
    assert!(
        wait_until(Duration::from_secs(20), || {
            let reply = report(&mut con, "svc", "a", "0.1");
            let level: u8 = reply[0].parse().unwrap();
            let shares = std::array::from_fn(|at| reply[2 + at].parse().unwrap());
            seen.push((level, shares));
            level == 0 && shares == [1.0; 4]
        }),
        "the level never came down: {seen:?}"
    );
    let mut levels: Vec<u8> = seen.iter().map(|(level, _)| *level).collect();
    levels.dedup();
    assert_eq!(levels, [3, 2, 1, 0], "{seen:?}");
    for pair in seen.windows(2) {
        for class in 0..4 {
            assert!(
                pair[1].1[class] >= pair[0].1[class],
                "a share fell: {seen:?}"
            );
        }
    }
}

#[test]
fn a_report_expires_on_its_own() {
    let server = Server::start();
    let mut con = server.connect();
    items(
        &mut con,
        &["RL.LOAD.REPORT", "svc", "dying", "300", "cpu", "0.99"],
    );
    items(
        &mut con,
        &["RL.LOAD.REPORT", "svc", "alive", "600000", "cpu", "0.1"],
    );
    // The dying instance stops counting once its report's 300 ms pass (the server says
    // when; the wait is bounded, not timed).
    let counted = |con: &mut Connection| items(con, &["RL.LOAD.STATUS", "svc"])[5].clone();
    assert!(
        wait_until(Duration::from_secs(10), || counted(&mut con) == "1"),
        "the expired report still counts"
    );
    let status = items(&mut con, &["RL.LOAD.STATUS", "svc"]);
    assert!(status[11].starts_with("[cpu 0.1"), "{status:?}");
}

#[test]
fn a_request_shed_by_load_writes_nothing_and_says_so() {
    let server = Server::start();
    let mut con = server.connect();
    set_policy(&mut con, "{s}load");
    report(&mut con, "{s}load", "a", "0.9");
    let call = |priority: &'static str| {
        vec![
            "RL.ALL",
            "3",
            "{s}load",
            "{s}user:1",
            "{s}pool",
            "LOAD",
            priority,
            "THROTTLE",
            "9",
            "10",
            "60",
            "LEASE",
            "5",
            "60",
        ]
    };
    // Level 2 admits every critical_plus request: the rate and the lease are taken, the
    // last integer (after the lease id) says no level shed it.
    let admitted = ints(&mut con, &call("critical_plus"));
    assert_eq!(admitted.len(), 7, "{admitted:?}");
    // The binding limiter is the lease: 4 of its 5 slots left, held for 60 s.
    assert_eq!(admitted[..5], [0, 5, 4, -1, 60]);
    assert!(admitted[5] > 0, "a lease id");
    assert_eq!(admitted[6], 0, "not shed");
    // A sheddable request is shed: refused, told to retry after the policy's second, the
    // level that shed it last; the rate and the lease as a peek sees them, uncharged.
    let before = (
        snapshot(&mut con, b"{s}user:1"),
        query::<Vec<u8>, _>(&mut con, &["DUMP", "{s}pool"]),
    );
    let shed = ints(&mut con, &call("sheddable"));
    assert_eq!(shed, [1, 5, 4, 1, 60, 0, 2]);
    let after = (
        snapshot(&mut con, b"{s}user:1"),
        query::<Vec<u8>, _>(&mut con, &["DUMP", "{s}pool"]),
    );
    assert_eq!(before, after, "a request shed by load writes nothing");
    let info: String = query(&mut con, &["INFO", "ratelimit"]);
    assert!(info.contains("shed=1"), "{info}");
    // The load gate alone answers too.
    assert_eq!(
        ints(&mut con, &["RL.ALL", "1", "{s}load", "LOAD", "3"]),
        [1, 0, 0, 1, 0, 2]
    );
    assert_eq!(
        ints(&mut con, &["RL.ALL", "1", "{s}load", "LOAD", "0"]),
        [0, 0, 0, -1, 0, 0]
    );
    // A missing service key: level 0, everything passes.
    assert_eq!(
        ints(&mut con, &["RL.ALL", "1", "{s}none", "LOAD", "sheddable"]),
        [0, 0, 0, -1, 0, 0]
    );
    // The load falls: the level steps down one level an instant (a hold of 0), so level 0
    // comes at a later instant than the report's, as the server's status tells; then
    // everything is admitted again.
    report(&mut con, "{s}load", "a", "0.1");
    assert!(
        wait_until(Duration::from_secs(10), || items(
            &mut con,
            &["RL.LOAD.STATUS", "{s}load"]
        )[1] == "0"),
        "the level never came down"
    );
    let again = ints(&mut con, &call("sheddable"));
    assert_eq!(again[0], 0);
    assert_eq!(again[6], 0);
}

#[test]
fn a_share_admits_that_part_of_a_priority() {
    let server = Server::start();
    let mut con = server.connect();
    set_policy(&mut con, "svc");
    report(&mut con, "svc", "a", "0.6");
    // Level 1 admits half of `sheddable`, at random, each call drawing anew.
    let calls = 2_000;
    let admitted = (0..calls)
        .filter(|_| ints(&mut con, &["RL.ALL_RO", "1", "svc", "LOAD", "sheddable"])[0] == 0)
        .count();
    // Binomial(2000, 0.5): 1000 ± 150 is ±6.7 standard deviations.
    assert!((850..=1_150).contains(&admitted), "{admitted} of {calls}");
    // Everything else is admitted at level 1.
    for priority in ["critical_plus", "critical", "sheddable_plus"] {
        assert_eq!(
            ints(&mut con, &["RL.ALL_RO", "1", "svc", "LOAD", priority])[0],
            0
        );
    }
}

#[test]
fn a_change_of_policy_is_seen_by_the_next_call_of_every_client() {
    let server = Server::start();
    let (mut ops, mut gateway) = (server.connect(), server.connect());
    report(&mut ops, "svc", "a", "0.6");
    // The default policy's first level is cpu 0.80: nothing is shed at 0.6.
    assert_eq!(
        ints(
            &mut gateway,
            &["RL.ALL", "1", "svc", "LOAD", "sheddable_plus"]
        )[0],
        0
    );
    // Online: a policy whose first level is cpu 0.5 and sheds every sheddable_plus there.
    let policy = [
        "RL.LOAD.POLICY",
        "svc",
        "HOLD",
        "0",
        "LEVEL",
        "cpu",
        "0.5",
        "SHARES",
        "1",
        "1",
        "0",
        "0",
    ];
    assert_eq!(query::<String, _>(&mut ops, &policy), "OK");
    assert_eq!(
        ints(
            &mut gateway,
            &["RL.ALL", "1", "svc", "LOAD", "sheddable_plus"]
        ),
        [1, 0, 0, 1, 0, 1]
    );
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    set_policy(&mut con, "svc");
    report(&mut con, "svc", "a", "0.6");
    let before = snapshot(&mut con, b"svc");
    let cases: &[(&[&str], &str)] = &[
        (
            &["RL.LOAD.REPORT", "svc", "a", "1000", "gpu", "0.5"],
            "ERR unknown factor",
        ),
        (
            &[
                "RL.LOAD.POLICY",
                "svc",
                "FACTOR",
                "queue",
                "MAX",
                "LEVEL",
                "queue",
                "10",
                "SHARES",
                "1",
                "1",
                "0",
                "0",
            ],
            "ERR FACTOR declares a factor of the application's own, not a built-in one",
        ),
        (
            &["RL.LOAD.REPORT", "svc", "a", "1000", "bbr", "0.5"],
            "ERR unknown factor",
        ),
        (
            &["RL.LOAD.REPORT", "svc", "a", "1000", "cpu", "-1"],
            "ERR a value must be a decimal number, not negative",
        ),
        (
            &["RL.LOAD.REPORT", "svc", "a", "1000", "cpu", "nan"],
            "ERR a value must be a decimal number, not negative",
        ),
        (
            &["RL.LOAD.REPORT", "svc", "a", "0", "cpu", "0.5"],
            "ERR ttl must be a positive number of milliseconds",
        ),
        (
            &["RL.LOAD.REPORT", "svc", "a b", "1000", "cpu", "0.5"],
            "ERR a name has 1 to 64",
        ),
        (
            &["RL.LOAD.REPORT", "svc", "a", "1000", "cpu"],
            "ERR syntax error. Usage: RL.LOAD.REPORT",
        ),
        (
            &[
                "RL.LOAD.POLICY",
                "svc",
                "LEVEL",
                "cpu",
                "0.9",
                "SHARES",
                "1",
                "1",
                "1",
                "0",
                "LEVEL",
                "cpu",
                "0.5",
                "SHARES",
                "1",
                "1",
                "0",
                "0",
            ],
            "ERR levels out of order",
        ),
        (
            &[
                "RL.LOAD.POLICY",
                "svc",
                "LEVEL",
                "cpu",
                "0.9",
                "SHARES",
                "1",
                "1",
                "1",
                "1.5",
            ],
            "ERR a share must be a number from 0 to 1",
        ),
        (
            &[
                "RL.LOAD.POLICY",
                "svc",
                "LEVEL",
                "cpu",
                "0.9",
                "SHARES",
                "0",
                "1",
                "1",
                "1",
            ],
            "ERR shares out of order",
        ),
        (
            &[
                "RL.LOAD.POLICY",
                "svc",
                "LEVEL",
                "gpu",
                "0.9",
                "SHARES",
                "1",
                "1",
                "1",
                "1",
            ],
            "ERR unknown factor",
        ),
        (
            &["RL.LOAD.POLICY", "svc", "LEVEL", "cpu", "0.9"],
            "ERR syntax error. Usage: RL.LOAD.POLICY",
        ),
        (
            &["RL.ALL", "1", "svc", "LOAD", "urgent"],
            "ERR no such priority",
        ),
        (&["RL.ALL", "1", "svc", "LOAD", "4"], "ERR no such priority"),
        (
            &["RL.ALL", "2", "svc", "x", "LOAD", "0", "LOAD", "1"],
            "ERR at most one LOAD in a call",
        ),
        (
            &[
                "RL.ALL", "2", "svc", "x", "LOAD", "0", "THROTTLE", "1", "1", "1", "DELAY", "10",
            ],
            "ERR LOAD and DELAY cannot be combined",
        ),
        (
            &[
                "RL.ALL", "2", "svc", "x", "LOAD", "0", "THROTTLE", "1", "1", "1", "FORCE",
            ],
            "ERR LOAD and FORCE cannot be combined",
        ),
    ];
    for (call, message) in cases {
        let refused = error(&mut con, call);
        assert!(refused.starts_with(message), "{call:?}: {refused}");
        assert_eq!(
            snapshot(&mut con, b"svc"),
            before,
            "{call:?} changed the service"
        );
        assert_eq!(query::<i64, _>(&mut con, &["EXISTS", "x"]), 0, "{call:?}");
    }
    // A key of another kind is WRONGTYPE either way.
    ints(&mut con, &["CL.THROTTLE", "gcra", "5", "1", "60"]);
    let gcra = snapshot(&mut con, b"gcra");
    assert!(error(
        &mut con,
        &["RL.LOAD.REPORT", "gcra", "a", "1000", "cpu", "1"]
    )
    .starts_with("WRONGTYPE"));
    assert!(error(&mut con, &["RL.ALL", "1", "gcra", "LOAD", "0"]).starts_with("WRONGTYPE"));
    assert_eq!(snapshot(&mut con, b"gcra"), gcra);
}

#[test]
fn replicas_and_the_aof_hold_what_the_master_holds() {
    let master = Server::builder().aof().start();
    let replica = Server::start_replica(&master);
    let mut con = master.connect();
    report(&mut con, "plain", "a", "0.85");
    report(&mut con, "plain", "b", "0.95");
    set_policy(&mut con, "configured");
    report(&mut con, "configured", "a", "0.9");
    wait_for_replicas(&mut con, 1);
    let mut copy = replica.connect();
    let restarted = master.start_from_aof_copy();
    let mut loaded = restarted.connect();
    for key in [&b"plain"[..], b"configured"] {
        let held = snapshot(&mut con, key);
        assert!(held.is_some());
        assert_eq!(snapshot(&mut copy, key), held, "the replica");
        assert_eq!(snapshot(&mut loaded, key), held, "the AOF");
    }
    // The level the copies read is the master's.
    assert_eq!(items(&mut copy, &["RL.LOAD.STATUS", "configured"])[1], "2");
}
