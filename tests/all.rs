//! RL.ALL on a live server: several limiters, one atomic all-or-nothing decision, on the
//! single commands' own state; every error changing nothing; racing clients; replicas, the
//! AOF and ACL.

mod support;

use std::sync::{Arc, Barrier};
use std::thread;

use redis::Value;
use support::copies::assert_copies_agree;
use support::workload::state;
use support::{assert_expires_after, changes, error, ints, query, Server};

fn words(call: &[&str]) -> Vec<String> {
    call.iter().map(|word| word.to_string()).collect()
}

#[test]
fn the_binding_limiter_replies_and_the_state_is_the_single_commands() {
    let server = Server::start();
    let mut con = server.connect();
    // 3 at once then one every 20 s, and 5 per minute exactly.
    let call = [
        "RL.ALL",
        "2",
        "{u1}:gcra",
        "{u1}:log",
        "THROTTLE",
        "2",
        "3",
        "60",
        "LOG",
        "5",
        "60",
    ];
    // Admitted: the fewest remaining binds; the longest reset.
    assert_eq!(ints(&mut con, &call), [0, 3, 2, -1, 60]);
    let mut twice = call.to_vec();
    twice.push("2");
    assert_eq!(ints(&mut con, &twice), [0, 3, 0, -1, 60]);
    // The throttle refuses: its wait, and nothing charged to the log.
    assert_eq!(ints(&mut con, &call), [1, 3, 0, 20, 60]);
    assert_eq!(
        ints(&mut con, &["RL.LOG_RO", "{u1}:log", "5", "60", "0"]),
        [0, 5, 2, -1, 60]
    );
    // The single commands see and charge the same state.
    assert_eq!(
        ints(&mut con, &["CL.THROTTLE", "{u1}:gcra", "2", "3", "60", "0"]),
        [0, 3, 0, -1, 60]
    );
    assert_eq!(
        ints(&mut con, &["RL.LOG", "{u1}:log", "5", "60", "2"]),
        [0, 5, 0, -1, 60]
    );
    // Now both refuse: the longest wait binds (the log's 60 s against the throttle's 20).
    assert_eq!(ints(&mut con, &call), [1, 5, 0, 60, 60]);
    let kind: String = query(&mut con, &["TYPE", "{u1}:gcra"]);
    assert_eq!(kind, "string");
    let kind: String = query(&mut con, &["TYPE", "{u1}:log"]);
    assert_eq!(kind, "ratelimit");
}

#[test]
fn details_add_each_limiters_own_reply_in_key_order() {
    let server = Server::start();
    let mut con = server.connect();
    let reply: Value = query(
        &mut con,
        &[
            "RL.ALL", "2", "a", "b", "LOG", "5", "60", "THROTTLE", "9", "1", "1", "MS", "DETAILS",
        ],
    );
    let Value::Array(items) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(items.len(), 7, "{items:?}");
    let head: Vec<i64> = items[..5]
        .iter()
        .map(|item| redis::from_redis_value(item.clone()).unwrap())
        .collect();
    let each: Vec<Vec<i64>> = items[5..]
        .iter()
        .map(|item| redis::from_redis_value(item.clone()).unwrap())
        .collect();
    // The unit applies to every limiter: a log of 5 per 60 ms, a throttle of 1 per ms.
    assert_eq!(head, [0, 5, 4, -1, 60]);
    assert_eq!(each, [vec![0, 5, 4, -1, 60], vec![0, 10, 9, -1, 1]]);
}

#[test]
fn a_refusal_leaves_every_key_byte_identical_and_propagates_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let keys = [
        "{t}:gcra",
        "{t}:fixed",
        "{t}:sliding",
        "{t}:buckets",
        "{t}:log",
    ];
    let limiters = [
        "THROTTLE", "9", "10", "86400", "WINDOW", "10", "86400", "FIXED", "WINDOW", "10", "86400",
        "SLIDING", "WINDOW", "10", "86400", "BUCKETS", "24", "LOG", "10", "86400",
    ];
    let call = |quantity: &'static str| {
        let mut call = vec!["RL.ALL", "5"];
        call.extend(keys);
        call.extend(limiters);
        call.push(quantity);
        call
    };
    assert_eq!(ints(&mut con, &call("6"))[..3], [0, 10, 4]);
    // Every limiter but the log holds 4 more; the log is at its limit.
    ints(&mut con, &["RL.LOG", "{t}:log", "10", "86400", "4"]);
    let before: Vec<_> = keys.iter().map(|key| state(&mut con, key)).collect();
    let writes = changes(&mut con);
    assert_eq!(ints(&mut con, &call("1"))[..3], [1, 10, 0]);
    // A peek (the log binds, with nothing left), and a quantity no limiter can ever hold
    // (the first binds).
    assert_eq!(ints(&mut con, &call("0"))[..4], [0, 10, 0, -1]);
    assert_eq!(ints(&mut con, &call("11"))[..4], [1, 10, 4, -1]);
    let after: Vec<_> = keys.iter().map(|key| state(&mut con, key)).collect();
    assert_eq!(after, before);
    assert_eq!(changes(&mut con), writes);
}

#[test]
fn peeks_write_nothing_and_units_apply_to_every_limiter() {
    let server = Server::start();
    let mut con = server.connect();
    let peek = [
        "RL.ALL", "2", "p1", "p2", "THROTTLE", "1", "1", "1000", "LOG", "4", "500", "0", "MS",
    ];
    assert_eq!(ints(&mut con, &peek), [0, 2, 2, -1, 0]);
    let exists: i64 = query(&mut con, &["EXISTS", "p1", "p2"]);
    assert_eq!(exists, 0);
    let mut take = peek.to_vec();
    take[11] = "1";
    // A throttle of 2 per 2 s in ms, a log of 4 per 500 ms.
    // The log's key expires with its window; a whole millisecond, rounded up.
    let reply = assert_expires_after(&mut con, "p2", 500, |con| ints(con, &take));
    assert_eq!(reply, [0, 2, 1, -1, 1_000]);
    let mut micros = take.clone();
    micros[12] = "US";
    micros[7] = "1000000";
    micros[10] = "500000";
    assert_eq!(ints(&mut con, &micros)[..4], [0, 2, 0, -1]);
}

#[test]
fn every_error_is_named_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    ints(&mut con, &["RL.LOG", "held", "5", "60"]);
    let _: () = query(&mut con, &["SET", "text", "hello"]);
    let before = state(&mut con, "held");
    let writes = changes(&mut con);
    let usage = "ERR syntax error. Usage: RL.ALL numkeys key [key ...] THROTTLE max_burst count period [WARMUP period] | WINDOW limit window [FIXED|SLIDING|BUCKETS n|ANCHORED] | LOG limit window | LEASE limit lease | LOAD priority [...] [quantity] [S|MS|US] [DETAILS] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]";
    let cases: &[(&[&str], &str)] = &[
        (
            &["x", "a", "LOG", "1", "1"],
            "ERR numkeys must be an integer from 1 to 16",
        ),
        (
            &["0", "a", "LOG", "1", "1"],
            "ERR numkeys must be an integer from 1 to 16",
        ),
        (
            &["5", "a", "b", "LOG", "1"],
            "ERR numkeys is more than the keys given",
        ),
        (
            &["2", "held", "held", "LOG", "1", "1", "LOG", "1", "1"],
            "ERR RL.ALL names the same key twice",
        ),
        (
            &["2", "held", "new", "LOG", "5", "60"],
            "ERR fewer limiters than keys: give one limiter per key",
        ),
        (
            &["1", "held", "LOG", "5", "60", "LOG", "5", "60"],
            "ERR more limiters than keys: give one limiter per key",
        ),
        (
            &["1", "held", "LEAKY", "5", "60"],
            "ERR unknown limiter: expected THROTTLE, WINDOW, LOG, LEASE or LOAD",
        ),
        (
            &["1", "held", "THROTTLE", "1", "1"],
            "ERR THROTTLE takes max_burst count period [WARMUP period]",
        ),
        (
            &["1", "held", "LOG", "0", "60"],
            "ERR limit must be positive",
        ),
        (
            &[
                "2", "held", "new", "LOG", "5", "60", "WINDOW", "5", "60", "BUCKETS", "9999",
            ],
            "ERR BUCKETS must be an integer from 1 to 3600",
        ),
        (&["1", "held", "LOG", "5", "60", "1", "2"], usage),
        (
            &["1", "held", "LOG", "5", "60", "-1"],
            "ERR quantity must not be negative",
        ),
        (
            &["1", "held", "LOG", "5", "60", "BLOCK", "0"],
            "ERR BLOCK must be a positive integer",
        ),
        // Another type, or another algorithm's state, on one key: WRONGTYPE, and the other
        // key is left alone.
        (
            &["2", "held", "text", "LOG", "5", "60", "LOG", "5", "60"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &[
                "2", "new", "held", "LOG", "5", "60", "THROTTLE", "1", "1", "1",
            ],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
    ];
    for (args, expected) in cases {
        let mut call = vec!["RL.ALL"];
        call.extend_from_slice(args);
        assert_eq!(error(&mut con, &call), *expected, "{args:?}");
    }
    assert_eq!(
        error(&mut con, &["RL.ALL", "1", "held"]),
        "ERR wrong number of arguments for 'rl.all' command"
    );
    assert_eq!(
        error(
            &mut con,
            &["RL.ALL_RO", "1", "held", "LOG", "5", "60", "REFUND"]
        ),
        "ERR REFUND is not allowed in a read-only dry run (the _RO variants never write)"
    );
    assert_eq!(state(&mut con, "held"), before);
    let exists: i64 = query(&mut con, &["EXISTS", "new"]);
    assert_eq!(exists, 0);
    assert_eq!(changes(&mut con), writes);
}

#[test]
fn racing_connections_admit_exactly_the_tightest_limit() {
    let server = Server::start();
    let connections = 10;
    let start = Arc::new(Barrier::new(connections));
    let call = words(&[
        "RL.ALL",
        "3",
        "{r}:gcra",
        "{r}:window",
        "{r}:log",
        "THROTTLE",
        "99",
        "1",
        "86400",
        "WINDOW",
        "70",
        "86400",
        "LOG",
        "80",
        "86400",
    ]);
    let racers: Vec<_> = (0..connections)
        .map(|_| {
            let (start, call) = (Arc::clone(&start), call.clone());
            let mut con = server.connect();
            thread::spawn(move || {
                start.wait();
                (0..20).filter(|_| ints(&mut con, &call)[0] == 0).count()
            })
        })
        .collect();
    let admitted: usize = racers.into_iter().map(|racer| racer.join().unwrap()).sum();
    assert_eq!(admitted, 70);
    // Each limiter was charged exactly the admitted requests.
    let mut con = server.connect();
    assert_eq!(
        ints(
            &mut con,
            &["CL.THROTTLE_RO", "{r}:gcra", "99", "1", "86400", "0"]
        )[2],
        30
    );
    assert_eq!(
        ints(
            &mut con,
            &["RL.WINDOW_RO", "{r}:window", "70", "86400", "0"]
        )[2],
        0
    );
    assert_eq!(
        ints(&mut con, &["RL.LOG_RO", "{r}:log", "80", "86400", "0"])[2],
        10
    );
}

#[test]
fn replicas_and_the_aof_hold_the_same_state_and_the_effects_are_one_transaction() {
    let keys = [
        "{a}:gcra",
        "{a}:fixed",
        "{a}:buckets",
        "{a}:log",
        "{b}:log",
        "{b}:gcra",
    ];
    assert_copies_agree(&keys, |con| {
        let first = [
            "RL.ALL",
            "4",
            "{a}:gcra",
            "{a}:fixed",
            "{a}:buckets",
            "{a}:log",
            "THROTTLE",
            "3",
            "1",
            "86400",
            "WINDOW",
            "5",
            "86400",
            "FIXED",
            "WINDOW",
            "6",
            "86400",
            "BUCKETS",
            "24",
            "LOG",
            "4",
            "86400",
        ];
        for quantity in ["1", "2", "0", "9", "1", "1"] {
            let mut call = first.to_vec();
            call.push(quantity);
            ints(con, &call);
        }
        let second = [
            "RL.ALL", "2", "{b}:log", "{b}:gcra", "LOG", "2", "86400", "THROTTLE", "0", "1",
            "86400", "MS",
        ];
        for _ in 0..3 {
            ints(con, &second);
        }
    });
    // What the AOF holds for an admitted call over several keys: one MULTI/EXEC with every
    // effect, never the command itself.
    let server = Server::builder().aof().start();
    let mut con = server.connect();
    ints(
        &mut con,
        &[
            "RL.ALL", "2", "{c}:gcra", "{c}:log", "THROTTLE", "1", "1", "60", "LOG", "2", "60",
        ],
    );
    let aof = server.aof();
    let call = &aof[aof.find("multi").expect("a MULTI")..];
    let set = call.find("pxat").expect("the throttle's SET ... PXAT");
    let apply = call.find("rl.log.apply").expect("the log's change");
    let exec = call.find("exec").expect("an EXEC");
    assert!(set < exec && apply < exec, "{call}");
    assert!(!aof.contains("rl.all"), "{aof}");
}

#[test]
fn acl_key_patterns_apply_to_every_key_and_getkeys_finds_them() {
    let server = Server::start();
    let mut admin = server.connect();
    let keys: Vec<String> = query(
        &mut admin,
        &[
            "COMMAND", "GETKEYS", "RL.ALL", "2", "t1:a", "t2:b", "LOG", "1", "1", "THROTTLE", "1",
            "1", "1",
        ],
    );
    assert_eq!(keys, ["t1:a", "t2:b"]);
    let _: () = query(
        &mut admin,
        &["ACL", "SETUSER", "u", "on", ">pw", "~t1:*", "+@all"],
    );
    let mut con = server.connect();
    let _: () = query(&mut con, &["AUTH", "u", "pw"]);
    let refused = error(
        &mut con,
        &[
            "RL.ALL", "2", "t1:a", "t2:b", "LOG", "1", "1", "LOG", "1", "1",
        ],
    );
    assert!(refused.starts_with("NOPERM"), "{refused}");
    assert_eq!(
        ints(
            &mut con,
            &["RL.ALL", "2", "t1:a", "t1:b", "LOG", "1", "60", "LOG", "1", "60"]
        ),
        [0, 1, 0, -1, 60]
    );
    let exists: i64 = query(&mut admin, &["EXISTS", "t2:b"]);
    assert_eq!(exists, 0);
}
