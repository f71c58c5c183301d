//! What a request that does not fit now does (`DELAY`, `AT_MOST`, `FORCE`) and `WARMUP`, on
//! live servers: exact replies for every command, the errors that change nothing, the
//! counters, and the same state on a replica and after an AOF replay.

mod support;

use support::workload::state;
use support::{error, ints, query, wait_for_replicas, Server};

/// About a day, in seconds: 86,400, or a little more when a clock-aligned window of a day
/// would end within two hours (a `FIXED` window that resets during a test admits what the
/// test expects refused, and a `DELAY` past its end waits less). The tests read every time
/// from the replies, so the length itself does not matter.
fn day() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    [86_400u64, 90_000, 93_600]
        .into_iter()
        .find(|length| length - now % length > 7_200)
        .unwrap_or(86_400)
        .to_string()
}

/// Every limiter command and algorithm, 2 a day on `key` (nothing refills while a test
/// runs), up to the quantity.
fn limiters(key: &str) -> Vec<Vec<String>> {
    let day = day();
    let day = day.as_str();
    let words = |words: &[&str]| words.iter().map(|word| word.to_string()).collect();
    vec![
        words(&["CL.THROTTLE", key, "1", "2", day]),
        words(&["RL.WINDOW", key, "2", day, "FIXED"]),
        words(&["RL.WINDOW", key, "2", day, "SLIDING"]),
        words(&["RL.WINDOW", key, "2", day, "BUCKETS", "4"]),
        words(&["RL.LOG", key, "2", day]),
        words(&[
            "RL.ALL",
            "2",
            &format!("{{{key}}}a"),
            &format!("{{{key}}}b"),
            "THROTTLE",
            "1",
            "2",
            day,
            "LOG",
            "2",
            day,
        ]),
    ]
}

/// `limiter` with a quantity and options after it. The quantity comes first among the
/// optional arguments, so a window's algorithm keyword moves after it.
fn call(limiter: &[String], quantity: u64, options: &[&str]) -> Vec<String> {
    let mut command = limiter.to_vec();
    let algorithm = command
        .iter()
        .position(|word| ["FIXED", "SLIDING", "BUCKETS"].contains(&word.as_str()))
        .filter(|_| command[0] == "RL.WINDOW");
    let algorithm: Vec<String> = algorithm.map_or(Vec::new(), |at| command.split_off(at));
    command.push(quantity.to_string());
    command.extend(algorithm);
    command.extend(options.iter().map(|word| word.to_string()));
    command
}

#[test]
fn each_option_answers_exactly_on_every_command() {
    let server = Server::start();
    let mut con = server.connect();
    for index in 0..limiters("x").len() {
        let limiter = &limiters(&format!("exact{index}"))[index];
        let name = &limiter[0];
        // AT_MOST: 3 asked, the limit of 2 granted; then nothing fits, refused as 1 would be.
        let reply = ints(&mut con, &call(limiter, 3, &["AT_MOST"]));
        assert_eq!(
            [reply[0], reply[1], reply[2], reply[3], reply[5]],
            [0, 2, 0, -1, 2],
            "{name}"
        );
        assert_eq!(reply.len(), 6, "{name}");
        let reply = ints(&mut con, &call(limiter, 3, &["AT_MOST"]));
        assert_eq!([reply[0], reply[2], reply[5]], [1, 0, 0], "{name}");
        assert!(reply[3] > 0, "{name}");
        // DELAY: the next slot is hours away (a day's limit): refused with a short bound,
        // the wait shortened by it; admitted with a bound of days, the wait in the reply.
        let plain = ints(&mut con, &call(limiter, 1, &[]));
        let fits_in = plain[3];
        let reply = ints(&mut con, &call(limiter, 1, &["DELAY", "60"]));
        assert_eq!([reply[0], reply[5]], [1, 0], "{name}");
        assert!(
            (fits_in - 60 - reply[3]).abs() <= 1,
            "{name}: {reply:?} after {plain:?}"
        );
        let reply = ints(&mut con, &call(limiter, 1, &["DELAY", "200000"]));
        assert_eq!([reply[0], reply[2], reply[3]], [0, 0, -1], "{name}");
        assert!(
            (reply[5] - fits_in).abs() <= 1,
            "{name}: {reply:?} after {plain:?}"
        );
        // The queue is first come, first served: a plain call now waits behind it.
        let after = ints(&mut con, &call(limiter, 1, &[]));
        assert_eq!(after[0], 1, "{name}");
        assert!(after[3] >= reply[5], "{name}: {after:?}");
        // FORCE on a fresh key: admitted whatever it costs, and the debt holds later calls.
        let forced = limiters(&format!("forced{index}"))[index].clone();
        let reply = ints(&mut con, &call(&forced, 5, &["FORCE"]));
        assert_eq!(
            [reply[0], reply[1], reply[2], reply[3]],
            [0, 2, 0, -1],
            "{name}"
        );
        assert_eq!(reply.len(), 5, "{name}");
        let later = ints(&mut con, &call(&forced, 1, &[]));
        assert_eq!(later[0], 1, "{name}");
        assert!(
            later[3] >= 86_400,
            "{name}: the debt outlasts the first window: {later:?}"
        );
        // The read-only variant answers what the call would, writing nothing.
        let fresh = limiters(&format!("dry{index}"))[index].clone();
        let mut dry = call(&fresh, 3, &["AT_MOST"]);
        dry[0] = format!("{}_RO", dry[0]);
        assert_eq!(ints(&mut con, &dry)[5], 2, "{name}");
        let key = if fresh[0] == "RL.ALL" {
            &fresh[2]
        } else {
            &fresh[1]
        };
        let exists: i64 = query(&mut con, &["EXISTS", key]);
        assert_eq!(exists, 0, "{name}");
    }
}

#[test]
fn a_cold_throttle_warms_up() {
    let server = Server::start();
    let mut con = server.connect();
    // 10 a second in bursts of 10, warming up over 10 s: cold, 3 fit at once.
    let mut warming = |quantity: &str| {
        let args = [
            "CL.THROTTLE",
            "w",
            "9",
            "10",
            "1000",
            quantity,
            "MS",
            "WARMUP",
            "10000",
        ];
        ints(&mut con, &args)
    };
    assert_eq!(warming("0"), [0, 10, 3, -1, 0]);
    let taken = warming("3");
    let without = ints(
        &mut con,
        &["CL.THROTTLE", "plain", "9", "10", "1000", "0", "MS"],
    );
    assert_eq!(without[2], 10);
    assert_eq!(taken[..4], [0, 10, 0, -1]);
    assert!(taken[4] > 800 && taken[4] <= 900, "{taken:?}");
    let value: Vec<u8> = query(&mut con, &["GET", "w"]);
    assert_eq!((value.len(), value[0]), (25, 0xFD));
    // RL.ALL takes the same limiter.
    let all = ints(
        &mut con,
        &[
            "RL.ALL", "2", "{u}a", "{u}b", "THROTTLE", "9", "10", "1000", "WARMUP", "10000",
            "WINDOW", "100", "1000", "0", "MS",
        ],
    );
    assert_eq!(all[..3], [0, 10, 3]);
}

#[test]
fn option_mistakes_are_errors_that_change_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let cases: &[(&[&str], &str)] = &[
        (&["CL.THROTTLE", "k", "1", "1", "10", "DELAY", "5", "AT_MOST"],
            "ERR DELAY and AT_MOST cannot be combined: a request waits for all of its quantity or takes part of it now"),
        (&["RL.LOG", "k", "1", "10", "FORCE", "DELAY", "5"],
            "ERR DELAY and FORCE cannot be combined: a forced request never waits"),
        (&["RL.WINDOW", "k", "1", "10", "AT_MOST", "FORCE"],
            "ERR AT_MOST and FORCE cannot be combined: a request takes part of its quantity or owes the rest"),
        (&["RL.WINDOW", "k", "1", "10", "DELAY", "5", "BLOCK", "10"],
            "ERR DELAY and BLOCK cannot be combined: a request that may wait is not refused for a penalty"),
        (&["RL.LOG", "k", "1", "10", "FORCE", "BLOCK", "10"],
            "ERR FORCE and BLOCK cannot be combined: a forced request is never refused"),
        (&["CL.THROTTLE", "k", "1", "1", "10", "REFUND", "AT_MOST"],
            "ERR REFUND and AT_MOST cannot be combined: a refund is never refused"),
        (&["CL.THROTTLE", "k", "1", "1", "10", "DELAY", "-1"],
            "ERR DELAY must be an integer of at least 0"),
        (&["CL.THROTTLE", "k", "1", "1", "10", "DELAY"], "ERR syntax error"),
        (&["CL.THROTTLE", "k", "1", "1", "10", "AT_MOST", "AT_MOST"], "ERR syntax error"),
        (&["CL.THROTTLE", "k", "1", "1", "10", "33", "FORCE"],
            "ERR FORCE takes at most 16 times the limit at once"),
        (&["RL.ALL", "2", "{a}x", "{a}y", "THROTTLE", "9", "1", "1", "LOG", "1", "10", "17", "FORCE"],
            "ERR FORCE takes at most 16 times the limit at once"),
        (&["CL.THROTTLE", "k", "1", "1", "10", "WARMUP", "0"], "ERR WARMUP must be positive"),
        (&["CL.THROTTLE", "k", "1", "1", "10", "WARMUP", "x"],
            "ERR WARMUP is not an integer or out of range"),
        (&["RL.ACQUIRE", "k", "2", "10", "DELAY", "5"],
            "ERR RL.ACQUIRE takes no DELAY, AT_MOST or FORCE: a lease is held whole until released, so wait for RL.RELEASE and retry"),
        (&["RL.WINDOW", "k", "1", "10", "WARMUP", "5"], "ERR syntax error"),
    ];
    for (command, expected) in cases {
        let message = error(&mut con, command);
        assert!(message.starts_with(expected), "{command:?}: {message}");
    }
    let keys: Vec<String> = query(&mut con, &["KEYS", "*"]);
    assert!(keys.is_empty(), "{keys:?}");
}

#[test]
fn info_counts_delayed_partial_and_forced_calls_apart() {
    let server = Server::start();
    let mut con = server.connect();
    let throttle = ["CL.THROTTLE", "c", "0", "1", "10"];
    let run = |con: &mut redis::Connection, extra: &[&str]| {
        let mut command: Vec<&str> = throttle.to_vec();
        command.extend(extra);
        ints(con, &command)
    };
    run(&mut con, &[]); // allowed
    run(&mut con, &["DELAY", "20"]); // delayed
    run(&mut con, &["DELAY", "1"]); // limited
    run(&mut con, &["1", "FORCE"]); // forced
    let _ = ints(
        &mut con,
        &["CL.THROTTLE", "d", "3", "1", "10", "6", "AT_MOST"],
    ); // partial
    let info: String = query(&mut con, &["INFO", "ratelimit"]);
    let line = info
        .lines()
        .find(|line| line.starts_with("ratelimit_cl.throttle:"))
        .unwrap();
    assert_eq!(
        line,
        "ratelimit_cl.throttle:calls=5,allowed=1,limited=1,peeks=0,refunds=0,errors=0,delayed=1,partial=1,forced=1,shed=0"
    );
}

#[test]
fn replicas_and_the_aof_reach_the_same_state() {
    let master = Server::builder()
        .aof()
        .arg("aof-use-rdb-preamble", "no")
        .start();
    let replica = Server::start_replica(&master);
    let mut con = master.connect();
    let mut keys = Vec::new();
    for index in 0..limiters("x").len() {
        let limiter = &limiters(&format!("r{index}"))[index];
        let calls: [(u64, &[&str]); 7] = [
            (1, &[]),
            (3, &["AT_MOST"]),
            (1, &["DELAY", "100000"]),
            (1, &["DELAY", "200000"]),
            (1, &["REFUND"]),
            (5, &["FORCE"]),
            (2, &["REFUND"]),
        ];
        for (quantity, options) in calls {
            let _: redis::Value = query(&mut con, &call(limiter, quantity, options));
        }
        if limiter[0] == "RL.ALL" {
            keys.extend([limiter[2].clone(), limiter[3].clone()]);
        } else {
            keys.push(limiter[1].clone());
        }
    }
    wait_for_replicas(&mut con, 1);
    let on_master: Vec<_> = keys.iter().map(|key| state(&mut con, key)).collect();
    assert!(on_master.iter().all(Option::is_some), "{on_master:?}");
    let mut replica_con = replica.connect();
    let on_replica: Vec<_> = keys
        .iter()
        .map(|key| state(&mut replica_con, key))
        .collect();
    assert_eq!(on_replica, on_master);
    // The AOF replayed (commands, no RDB preamble) gives the same states.
    let mut master = master;
    master.restart();
    let mut con = master.connect();
    let replayed: Vec<_> = keys.iter().map(|key| state(&mut con, key)).collect();
    assert_eq!(replayed, on_master);
}
