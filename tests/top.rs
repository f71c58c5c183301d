//! `RL.TOP`: off until asked for; then the keys a server refused most, exactly for a stream
//! that fits, only refusals counted (not admitted calls, peeks or dry runs), per server (a
//! replica and the AOF see none of it), sized by the module argument and `CONFIG SET`, in
//! fixed memory under a million distinct refused keys, and every mistake an error.

mod support;

use redis::Value;
use support::{error, ints, query, Server};

/// A server counting refused keys, as an operator turns it on: 128 keys a minute.
fn counting() -> support::ServerBuilder {
    Server::builder().module_arg("top-keys").module_arg("128")
}

const TURNED_OFF: &str = "ERR RL.TOP is off on this server: turn it on with CONFIG SET ratelimit.top-keys 128 (or the module argument top-keys 128)";

/// `RL.TOP`'s reply as `(key, refusals, error)`.
fn top(con: &mut redis::Connection, args: &[&str]) -> Vec<(String, i64, i64)> {
    let mut call = vec!["RL.TOP"];
    call.extend_from_slice(args);
    let reply: Vec<(String, i64, i64)> = query(con, &call);
    reply
}

#[test]
fn the_most_refused_keys_come_first_and_only_refusals_count() {
    let server = counting().start();
    let mut con = server.connect();
    // Each key admits one a minute; then `n` more calls are refused.
    for (key, refused) in [("a", 5), ("b", 2), ("c", 9), ("d", 1)] {
        for _ in 0..=refused {
            ints(&mut con, &["RL.LOG", key, "1", "60"]);
        }
    }
    // Peeks, dry runs, admitted calls and refunds count nothing.
    ints(&mut con, &["RL.LOG", "a", "1", "60", "0"]);
    ints(&mut con, &["RL.LOG_RO", "a", "1", "60"]);
    ints(&mut con, &["CL.THROTTLE", "e", "5", "5", "60"]);
    ints(&mut con, &["RL.LOG", "a", "1", "60", "1", "REFUND"]);
    // In RL.ALL, the keys that refused; an oversized request is refused too.
    ints(
        &mut con,
        &[
            "RL.ALL", "2", "{t}x", "{t}y", "LOG", "9", "60", "LOG", "1", "60", "2",
        ],
    );
    ints(&mut con, &["RL.WINDOW", "f", "1", "60", "3"]);
    ints(&mut con, &["RL.ACQUIRE", "g", "1", "60"]);
    ints(&mut con, &["RL.ACQUIRE", "g", "1", "60"]);
    let expected = |rows: &[(&str, i64)]| -> Vec<(String, i64, i64)> {
        rows.iter()
            .map(|&(key, n)| (key.to_owned(), n, 0))
            .collect()
    };
    assert_eq!(
        top(&mut con, &[]),
        expected(&[
            ("c", 9),
            ("a", 5),
            ("b", 2),
            ("d", 1),
            ("f", 1),
            ("g", 1),
            ("{t}y", 1)
        ])
    );
    assert_eq!(top(&mut con, &["2"]), expected(&[("c", 9), ("a", 5)]));
    assert_eq!(top(&mut con, &["0"]), expected(&[]));
    assert_eq!(query::<String, _>(&mut con, &["RL.TOP.RESET"]), "OK");
    assert_eq!(top(&mut con, &[]), expected(&[]));
    for (args, message) in [
        (
            &["x"][..],
            "ERR count must be a non-negative integer. Usage: RL.TOP [count]",
        ),
        (
            &["-1"],
            "ERR count must be a non-negative integer. Usage: RL.TOP [count]",
        ),
        (
            &["RESET"],
            "ERR RL.TOP RESET is RL.TOP.RESET, an admin command (as SLOWLOG RESET is)",
        ),
        (
            &["1", "2"],
            "ERR wrong number of arguments for 'rl.top' command",
        ),
    ] {
        let mut call = vec!["RL.TOP"];
        call.extend_from_slice(args);
        assert_eq!(error(&mut con, &call), message);
    }
}

#[test]
fn a_summary_too_small_for_the_stream_bounds_its_error() {
    let server = Server::builder()
        .module_arg("top-keys")
        .module_arg("2")
        .start();
    let mut con = server.connect();
    assert_eq!(
        query::<Vec<String>, _>(&mut con, &["CONFIG", "GET", "ratelimit.top-keys"]),
        ["ratelimit.top-keys", "2"]
    );
    // Oversized requests: refused, nothing written.
    for (key, refused) in [
        ("hot", 50),
        ("warm", 20),
        ("cold1", 1),
        ("cold2", 1),
        ("cold3", 1),
    ] {
        for _ in 0..refused {
            ints(&mut con, &["RL.WINDOW", key, "1", "60", "2"]);
        }
    }
    let rows = top(&mut con, &[]);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0], ("hot".to_owned(), 50, 0));
    // The second slot went to the cold keys last: its count bounds the truth from above,
    // count minus error from below.
    let (_, count, overcount) = &rows[1];
    assert!(count - overcount <= 1 && *count >= 1, "{rows:?}");
    // A new size starts afresh.
    assert_eq!(
        query::<String, _>(&mut con, &["CONFIG", "SET", "ratelimit.top-keys", "16"]),
        "OK"
    );
    assert_eq!(top(&mut con, &[]), []);
    assert!(error(&mut con, &["CONFIG", "SET", "ratelimit.top-keys", "-1"]).starts_with("ERR"));
    // 0 turns it off: nothing is counted, and RL.TOP says how to turn it on.
    query::<String, _>(&mut con, &["CONFIG", "SET", "ratelimit.top-keys", "0"]);
    ints(&mut con, &["RL.WINDOW", "hot", "1", "60", "2"]);
    assert_eq!(error(&mut con, &["RL.TOP"]), TURNED_OFF);
    query::<String, _>(&mut con, &["CONFIG", "SET", "ratelimit.top-keys", "16"]);
    assert_eq!(top(&mut con, &[]), []);
}

#[test]
fn it_is_off_until_turned_on_at_run_time() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(
        query::<Vec<String>, _>(&mut con, &["CONFIG", "GET", "ratelimit.top-keys"]),
        ["ratelimit.top-keys", "0"]
    );
    ints(&mut con, &["RL.WINDOW", "early", "1", "60", "2"]);
    assert_eq!(error(&mut con, &["RL.TOP"]), TURNED_OFF);
    assert_eq!(error(&mut con, &["RL.TOP", "5"]), TURNED_OFF);
    assert_eq!(query::<String, _>(&mut con, &["RL.TOP.RESET"]), "OK");
    assert_eq!(
        query::<String, _>(&mut con, &["CONFIG", "SET", "ratelimit.top-keys", "128"]),
        "OK"
    );
    // Counted from then on: the refusal before is not.
    ints(&mut con, &["RL.WINDOW", "late", "1", "60", "2"]);
    assert_eq!(top(&mut con, &[]), [("late".to_owned(), 1, 0)]);
}

#[test]
fn a_bad_size_stops_the_load() {
    for value in ["-1", "x", "100001"] {
        let log = Server::builder()
            .module_arg("top-keys")
            .module_arg(value)
            .try_start()
            .err()
            .expect("the server started with a bad top-keys");
        assert!(
            log.contains(&format!(
                "module argument top-keys takes a number of keys from 0 to 100000, not '{value}'"
            )),
            "{log}"
        );
    }
}

#[test]
fn it_is_per_server_neither_replicated_nor_persisted() {
    let master = counting().aof().start();
    let replica = counting().replica_of(&master).start();
    replica.wait_for_replication_link();
    let mut con = master.connect();
    for _ in 0..3 {
        ints(&mut con, &["RL.LOG", "k", "1", "60"]);
    }
    support::wait_for_replicas(&mut con, 1);
    assert_eq!(top(&mut con, &[]), [("k".to_owned(), 2, 0)]);
    assert_eq!(top(&mut replica.connect(), &[]), []);
    assert!(!master.aof().to_lowercase().contains("rl.top"));
    let restarted = master.start_from_aof_copy();
    let mut restarted = restarted.connect();
    query::<String, _>(
        &mut restarted,
        &["CONFIG", "SET", "ratelimit.top-keys", "128"],
    );
    assert_eq!(top(&mut restarted, &[]), []);
}

#[test]
fn memory_stays_flat_under_a_million_distinct_refused_keys() {
    // `TOP_REFUSALS` changes the count (`make valgrind` runs fewer).
    let refusals: usize = std::env::var("TOP_REFUSALS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1_000_000);
    let server = counting().start();
    let mut con = server.connect();
    let refuse = |con: &mut redis::Connection, from: usize, to: usize| {
        for chunk_start in (from..to).step_by(10_000) {
            let mut pipe = redis::pipe();
            for i in chunk_start..(chunk_start + 10_000).min(to) {
                // Oversized: refused without writing a key.
                pipe.cmd("RL.WINDOW")
                    .arg(format!("key:{i}"))
                    .arg(1)
                    .arg(60)
                    .arg(2);
            }
            let _: Vec<Value> = pipe.query(con).unwrap();
        }
    };
    // The summary fills first; then a million more keys pass through it.
    refuse(&mut con, 0, 10_000);
    let before = support::used_memory(&mut con);
    refuse(&mut con, 10_000, 10_000 + refusals);
    let after = support::used_memory(&mut con);
    assert!(
        after - before < 256 * 1024,
        "used_memory grew by {} bytes",
        after - before
    );
    assert_eq!(query::<i64, _>(&mut con, &["DBSIZE"]), 0);
    // The summary's memory is the server's (the module allocates through it): a leak would
    // show above. It lists the current minute's keys, and the previous one's if the run
    // crossed a minute.
    let listed = top(&mut con, &["1000"]).len();
    assert!((128..=256).contains(&listed), "{listed} keys");
}
