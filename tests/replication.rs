//! Deterministic replication and persistence: a replica, an AOF reload and a restart hold
//! the master's exact bytes and absolute expiry, because the module propagates what it
//! wrote (`SET key value PXAT expiry`), never the command for a replica to run again with
//! its own clock.

mod support;

use std::thread;
use std::time::Duration;

use redis::Connection;
use support::{ints, query, snapshot, Server};

/// Keys the workload may write.
const KEYS: usize = 24;

fn key(i: usize) -> String {
    format!("limiter:{i}")
}

/// The command, key and parameters of limiter `i` (before the quantity), and the keywords
/// after it: each command and algorithm in turn, in seconds and milliseconds. Every key
/// lives for 20 s or more, longer than the tests take.
fn limiter(i: usize) -> (Vec<String>, Vec<&'static str>) {
    let key = key(i);
    let words = |words: &[&str]| words.iter().map(|word| word.to_string()).collect();
    match i % 4 {
        0 => {
            let burst = (i % 3).to_string();
            let (count, period, unit) = match i % 3 {
                0 => ("30", "600", "S"),
                1 => ("1", "3600", "S"),
                _ => ("10", "600000", "MS"),
            };
            (
                words(&["CL.THROTTLE", &key, &burst, count, period]),
                vec![unit],
            )
        }
        1 => (words(&["RL.WINDOW", &key, "5", "600"]), vec!["FIXED"]),
        2 => (
            words(&["RL.WINDOW", &key, "5", "600000"]),
            vec!["SLIDING", "MS"],
        ),
        _ => (
            words(&["RL.WINDOW", &key, "5", "600"]),
            vec!["BUCKETS", "60"],
        ),
    }
}

/// A request of `quantity` to limiter `i`.
fn request(i: usize, quantity: &str) -> Vec<String> {
    let (mut command, keywords) = limiter(i);
    command.push(quantity.to_owned());
    command.extend(keywords.iter().map(|word| word.to_string()));
    command
}

fn call(con: &mut Connection, i: usize, quantity: &str) -> Vec<i64> {
    ints(con, &request(i, quantity))
}

/// Admitted, refused, peeked and oversized requests of every command and algorithm, alone
/// and in a transaction, over `KEYS` keys.
fn workload(con: &mut Connection) {
    for i in 0..KEYS {
        if i % 5 == 4 {
            // Only peeks and oversized requests: the key must never exist.
            call(con, i, "0");
            call(con, i, "1000");
            continue;
        }
        for _ in 0..(i % 7) {
            call(con, i, "1");
        }
        call(con, i, "0");
        call(con, i, "2");
        call(con, i, "1000");
    }
    let _: () = query(con, &["MULTI"]);
    for i in 0..4 {
        let _: () = query(con, &request(i, "1"));
    }
    let _: Vec<Vec<i64>> = query(con, &["EXEC"]);
}

fn snapshots(con: &mut Connection) -> Vec<Option<(Vec<u8>, i64)>> {
    (0..KEYS)
        .map(|i| snapshot(con, key(i).as_bytes()))
        .collect()
}

fn assert_expected_keys(state: &[Option<(Vec<u8>, i64)>]) {
    for (i, entry) in state.iter().enumerate() {
        assert_eq!(entry.is_some(), i % 5 != 4, "{}", key(i));
    }
}

fn command_calls(server: &Server, command: &str) -> i64 {
    server
        .info_field("commandstats", &format!("cmdstat_{command}"))
        .and_then(|stats| {
            stats
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[test]
fn replicas_hold_the_masters_bytes_and_expiry() {
    let master = Server::start();
    let replica = Server::start_replica(&master);
    // A replica without the module holds the same plain strings.
    let bare_replica = Server::builder()
        .without_module()
        .replica_of(&master)
        .start();
    bare_replica.wait_for_replication_link();
    let mut con = master.connect();
    workload(&mut con);
    master.wait_for_replicas(2);
    let on_master = snapshots(&mut con);
    assert_expected_keys(&on_master);
    assert_eq!(snapshots(&mut replica.connect()), on_master);
    assert_eq!(snapshots(&mut bare_replica.connect()), on_master);
    // What reached the replica were writes, not commands to run again.
    assert!(command_calls(&replica, "set") > 0);
    assert_eq!(command_calls(&replica, "cl.throttle"), 0);
    assert_eq!(command_calls(&replica, "rl.window"), 0);
}

#[test]
fn an_aof_reload_a_second_later_restores_the_same_state() {
    let mut server = Server::builder().aof().start();
    let mut con = server.connect();
    workload(&mut con);
    let before = snapshots(&mut con);
    assert_expected_keys(&before);
    thread::sleep(Duration::from_millis(1_100));
    let _: () = query(&mut con, &["DEBUG", "LOADAOF"]);
    assert_eq!(snapshots(&mut con), before);

    // The AOF holds absolute writes only.
    let aof = server.aof();
    assert!(aof.contains("pxat"), "{aof}");
    assert!(!aof.contains("cl.throttle"), "{aof}");
    assert!(!aof.contains("rl.window"), "{aof}");

    // So does a restart from it.
    server.restart();
    assert_eq!(snapshots(&mut server.connect()), before);
}

#[test]
fn a_rewritten_aof_keeps_the_same_state() {
    let mut server = Server::builder().aof().start();
    let mut con = server.connect();
    workload(&mut con);
    let before = snapshots(&mut con);
    server.rewrite_aof();
    server.restart();
    assert_eq!(snapshots(&mut server.connect()), before);
}
