//! `RL.WINDOW.COUNTS` and `RL.LOG.COUNTS`: a window's or a log's counts, read apart, exactly,
//! on the master and a replica, and every mistake an error that changes nothing.

mod support;

use support::{error, ints, query, wait_for_replicas, Server};

#[test]
fn a_log_reports_its_units_and_when_its_entries_leave() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(ints(&mut con, &["RL.LOG.COUNTS", "log", "60"]), [0, 0, 0]);
    ints(&mut con, &["RL.LOG", "log", "10", "60000", "3", "MS"]);
    std::thread::sleep(std::time::Duration::from_millis(50));
    ints(&mut con, &["RL.LOG", "log", "10", "60000", "2", "MS"]);
    let [count, oldest, newest] = ints(&mut con, &["RL.LOG.COUNTS", "log", "60000", "MS"])[..]
    else {
        unreachable!()
    };
    assert_eq!(count, 5);
    assert!(
        newest - oldest >= 50 && newest <= 60_000 && oldest > 59_000,
        "{oldest} {newest}"
    );
    // Refused requests and peeks count nothing, and the call writes nothing.
    ints(&mut con, &["RL.LOG", "log", "5", "60000", "1", "MS"]);
    assert_eq!(
        ints(&mut con, &["RL.LOG.COUNTS", "log", "60000", "MS"])[0],
        5
    );
    assert_eq!(
        ints(&mut con, &["RL.LOG.COUNTS", "log", "1", "US"]),
        [0, 0, 0]
    );
}

#[test]
fn a_window_reports_both_counts_as_its_calls_read_them() {
    let server = Server::start();
    let mut con = server.connect();
    // A window of 10^9 s: its boundaries are decades away.
    ints(
        &mut con,
        &["RL.WINDOW", "sliding", "100", "1000000000", "7"],
    );
    let reply = ints(&mut con, &["RL.WINDOW.COUNTS", "sliding", "1000000000"]);
    assert_eq!([reply[0], reply[1], reply[2]], [0, 0, 7]);
    assert!(
        reply[3] > 1_000_000_000 && reply[3] <= 2_000_000_000,
        "{reply:?}"
    );
    ints(
        &mut con,
        &["RL.WINDOW", "fixed", "100", "1000000000", "4", "FIXED"],
    );
    let reply = ints(
        &mut con,
        &["RL.WINDOW.COUNTS", "fixed", "1000000000", "FIXED"],
    );
    assert_eq!([reply[0], reply[1], reply[2]], [0, 0, 4]);
    assert!(reply[3] > 0 && reply[3] <= 1_000_000_000, "{reply:?}");
    // The weighted estimate the limiter uses, from the counts: nothing weighs yet.
    let remaining = ints(
        &mut con,
        &["RL.WINDOW_RO", "sliding", "100", "1000000000", "0"],
    )[2];
    assert_eq!(remaining, 93);
}

#[test]
fn a_replica_answers_the_same() {
    let master = Server::start();
    let replica = Server::start_replica(&master);
    let mut con = master.connect();
    ints(&mut con, &["RL.LOG", "log", "10", "3600", "3"]);
    ints(
        &mut con,
        &["RL.WINDOW", "window", "10", "1000000000", "2", "FIXED"],
    );
    wait_for_replicas(&mut con, 1);
    let mut replica_con = replica.connect();
    assert_eq!(
        ints(&mut replica_con, &["RL.LOG.COUNTS", "log", "3600"])[0],
        3
    );
    assert_eq!(
        ints(
            &mut replica_con,
            &["RL.WINDOW.COUNTS", "window", "1000000000", "FIXED"]
        )[2],
        2
    );
}

#[test]
fn mistakes_are_errors_that_change_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = query(&mut con, &["SET", "text", "hello"]);
    ints(&mut con, &["RL.WINDOW", "sliding", "10", "60"]);
    ints(&mut con, &["RL.LOG", "log", "10", "60"]);
    let cases: &[(&[&str], &str)] = &[
        (
            &["RL.WINDOW.COUNTS", "sliding", "60", "BUCKETS", "4"],
            "ERR syntax error. Usage: RL.WINDOW.COUNTS key window [FIXED|SLIDING|ANCHORED] [S|MS|US]",
        ),
        (
            &["RL.WINDOW.COUNTS", "sliding", "60", "3"],
            "ERR syntax error. Usage: RL.WINDOW.COUNTS key window [FIXED|SLIDING|ANCHORED] [S|MS|US]",
        ),
        (
            &["RL.WINDOW.COUNTS", "sliding", "60", "FIXED", "SLIDING"],
            "ERR syntax error. Usage: RL.WINDOW.COUNTS key window [FIXED|SLIDING|ANCHORED] [S|MS|US]",
        ),
        (
            &["RL.WINDOW.COUNTS", "sliding", "x"],
            "ERR window is not an integer or out of range",
        ),
        (
            &["RL.WINDOW.COUNTS", "sliding", "0"],
            "ERR window must be positive",
        ),
        (
            &["RL.WINDOW.COUNTS", "sliding", "60", "FIXED"],
            "WRONGTYPE the key holds the state of another RL.WINDOW algorithm",
        ),
        (
            &["RL.WINDOW.COUNTS", "text", "60"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["RL.WINDOW.COUNTS", "log", "60"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["RL.LOG.COUNTS", "log", "60", "DELAY", "3"],
            "ERR syntax error. Usage: RL.LOG.COUNTS key window [S|MS|US]",
        ),
        (
            &["RL.LOG.COUNTS", "sliding", "60"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["RL.LOG.COUNTS", "log"],
            "ERR wrong number of arguments for 'rl.log.counts' command",
        ),
    ];
    let before: Vec<Vec<u8>> = ["text", "sliding"]
        .iter()
        .map(|key| query(&mut con, &["DUMP", key]))
        .collect();
    for (command, expected) in cases {
        assert_eq!(error(&mut con, command), *expected, "{command:?}");
    }
    let after: Vec<Vec<u8>> = ["text", "sliding"]
        .iter()
        .map(|key| query(&mut con, &["DUMP", key]))
        .collect();
    assert_eq!(before, after);
}
