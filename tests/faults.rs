//! Faults: over `maxmemory` the calls that would write get Redis' `OOM` error while peeks
//! and refusals still answer; and a server killed with SIGKILL under load, with
//! `appendfsync always`, comes back holding every admission its clients saw, so no request
//! is admitted twice.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use support::{error, ints, query, wait_for_replicas, Server};

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// One limiter of each command and algorithm, with `limit` and a long window, on `key`.
fn limiters(key: &str, limit: u64) -> Vec<Vec<String>> {
    let limit = limit.to_string();
    let burst = (limit.parse::<u64>().unwrap() - 1).to_string();
    let words = |words: &[&str]| words.iter().map(|word| word.to_string()).collect();
    vec![
        words(&["CL.THROTTLE", &format!("{key}:gcra"), &burst, "1", "3600"]),
        words(&[
            "RL.WINDOW",
            &format!("{key}:fixed"),
            &limit,
            "1000000",
            "FIXED",
        ]),
        words(&["RL.WINDOW", &format!("{key}:sliding"), &limit, "1000000"]),
        words(&[
            "RL.WINDOW",
            &format!("{key}:buckets"),
            &limit,
            "1000000",
            "BUCKETS",
            "10",
        ]),
        words(&["RL.LOG", &format!("{key}:log"), &limit, "1000000"]),
    ]
}

/// `limiter` with a quantity (and, for RL.WINDOW, the algorithm after it).
fn request(limiter: &[String], quantity: u64) -> Vec<String> {
    let split = if limiter[0] == "CL.THROTTLE" { 5 } else { 4 };
    let mut command = limiter[..split].to_vec();
    command.push(quantity.to_string());
    command.extend_from_slice(&limiter[split..]);
    command
}

fn dump(con: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    query(con, &["DUMP", key])
}

#[test]
fn over_maxmemory_writes_get_oom_and_peeks_still_answer() {
    let server = Server::builder()
        .arg("maxmemory-policy", "noeviction")
        .start();
    check_oom(&server);
}

/// With a replica attached, a write reads Redis' memory state its own way (the used-memory
/// ratio, and only while a limit is set, which `CONFIG SET` changes): the same replies.
#[test]
fn over_maxmemory_with_a_replica_writes_get_oom_and_peeks_still_answer() {
    let server = Server::builder()
        .arg("maxmemory-policy", "noeviction")
        .start();
    let _replica = Server::start_replica(&server);
    check_oom(&server);
}

fn check_oom(server: &Server) {
    let mut con = server.connect();
    let limiters = limiters("user", 5);
    for limiter in &limiters {
        assert_eq!(ints(&mut con, &request(limiter, 2))[..3], [0, 5, 3]);
    }
    // Fill memory, then set the limit below what is used.
    let _: () = query(&mut con, &["SET", "ballast", &"x".repeat(8 << 20)]);
    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "1mb"]);
    // Redis' own deny-oom commands are refused now.
    assert_eq!(error(&mut con, &["SET", "probe", "1"]), OOM);

    for limiter in &limiters {
        let key = &limiter[1];
        let before = dump(&mut con, key);
        // Admitting would write: refused like any deny-oom command, nothing changed.
        assert_eq!(error(&mut con, &request(limiter, 1)), OOM, "{limiter:?}");
        assert_eq!(dump(&mut con, key), before);
        // A peek and a quantity that can never fit only read: they answer.
        assert_eq!(ints(&mut con, &request(limiter, 0))[..3], [0, 5, 3]);
        assert_eq!(ints(&mut con, &request(limiter, 6))[..3], [1, 5, 3]);
        // New keys are refused the same way.
        let mut fresh = limiter.clone();
        fresh[1] = format!("{key}:new");
        assert_eq!(error(&mut con, &request(&fresh, 1)), OOM);
        assert_eq!(ints(&mut con, &request(&fresh, 0))[..3], [0, 5, 5]);
    }

    // With memory back, writes go through again.
    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "0"]);
    for limiter in &limiters {
        assert_eq!(ints(&mut con, &request(limiter, 1))[..3], [0, 5, 2]);
    }
}

#[test]
fn a_server_killed_under_load_keeps_every_acknowledged_admission() {
    let mut server = Server::builder().aof().start();
    const LIMIT: u64 = 100_000;
    const CLIENTS: usize = 4;
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let mut con = server.connect();
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let limiters = limiters(&format!("client{client}"), LIMIT);
                // Per limiter: admissions acknowledged, and whether one was sent and not
                // answered (it may or may not have reached the AOF).
                let mut acknowledged = vec![0u64; limiters.len()];
                let mut in_flight = None;
                'load: while !stop.load(Ordering::Relaxed) {
                    for (i, limiter) in limiters.iter().enumerate() {
                        in_flight = Some(i);
                        match support::command(&request(limiter, 1)).query::<Vec<i64>>(&mut con) {
                            Ok(reply) => {
                                assert_eq!(reply[0], 0, "{limiter:?}: {reply:?}");
                                acknowledged[i] += 1;
                                in_flight = None;
                            }
                            Err(_) => break 'load,
                        }
                    }
                }
                (limiters, acknowledged, in_flight)
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(500));
    server.kill();
    stop.store(true, Ordering::Relaxed);
    let outcomes: Vec<_> = clients
        .into_iter()
        .map(|client| client.join().unwrap())
        .collect();

    server.restart();
    let mut con = server.connect();
    let mut total = 0;
    for (limiters, acknowledged, in_flight) in outcomes {
        for (i, limiter) in limiters.iter().enumerate() {
            let remaining = ints(&mut con, &request(limiter, 0))[2] as u64;
            let counted = LIMIT - remaining;
            let unanswered = u64::from(in_flight == Some(i));
            assert!(
                (acknowledged[i]..=acknowledged[i] + unanswered).contains(&counted),
                "{limiter:?}: {} acknowledged, {counted} counted after the restart",
                acknowledged[i]
            );
            total += acknowledged[i];
        }
    }
    assert!(total > 100, "only {total} requests before the kill");
    assert!(
        server.log().contains("DB loaded from append only file"),
        "{}",
        server.log()
    );
}

/// A write the server refuses after the value was changed in place (its expiry, or the
/// deletion of a key whose last entry went) is undone by deleting the key on the master and
/// on its replicas alike: the master never holds what its replicas do not. Every native
/// value's change (a log's take, a lease's grant, release and renewal) and every string
/// state's write is tried, with the expiry or the deletion failing once (`RL.DEBUG.FAIL`).
#[test]
fn a_write_the_server_refuses_leaves_the_master_and_its_replica_alike() {
    let master = Server::builder().module_arg("debug-commands").start();
    let replica = Server::start_replica(&master);
    let mut con = master.connect();
    let mut copy = replica.connect();
    // Each key exists first (its setup admits), so that the failing call changes a value
    // in place; `{id}` is the setup's lease id.
    let cases: [(&str, &[&str], &[&str]); 6] = [
        (
            "EXPIRE",
            &["RL.LOG", "f:log", "5", "60"],
            &["RL.LOG", "f:log", "5", "60"],
        ),
        (
            "EXPIRE",
            &["RL.ACQUIRE", "f:lease", "5", "60"],
            &["RL.ACQUIRE", "f:lease", "5", "60"],
        ),
        (
            "EXPIRE",
            &["RL.ACQUIRE", "f:renewed", "5", "60"],
            &["RL.RENEW", "f:renewed", "{id}", "120"],
        ),
        (
            "EXPIRE",
            &["CL.THROTTLE", "f:gcra", "5", "1", "60"],
            &["CL.THROTTLE", "f:gcra", "5", "1", "60"],
        ),
        // The last lease released: the set goes, and its deletion fails.
        (
            "DELETE",
            &["RL.ACQUIRE", "f:released", "5", "60"],
            &["RL.RELEASE", "f:released", "{id}"],
        ),
        // A refund of the only entry: the log goes.
        (
            "DELETE",
            &["RL.LOG", "f:refunded", "5", "60"],
            &["RL.LOG", "f:refunded", "5", "60", "1", "REFUND"],
        ),
    ];
    for (fail, setup, failing) in cases {
        let key = setup[1];
        let first = ints(&mut con, setup);
        assert_eq!(first[0], 0, "{setup:?}");
        let id = first.get(5).map(i64::to_string).unwrap_or_default();
        let failing: Vec<&str> = failing
            .iter()
            .map(|word| if *word == "{id}" { id.as_str() } else { word })
            .collect();
        assert_eq!(query::<String, _>(&mut con, &["RL.DEBUG.FAIL", fail]), "OK");
        let refused = error(&mut con, &failing);
        assert!(
            refused.starts_with("ERR internal error"),
            "{failing:?}: {refused}"
        );
        wait_for_replicas(&mut con, 1);
        assert_eq!(
            dump(&mut con, key),
            None,
            "{failing:?}: the key goes on the master"
        );
        assert_eq!(
            dump(&mut copy, key),
            None,
            "{failing:?}: and on the replica"
        );
    }
}
