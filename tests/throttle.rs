//! CL.THROTTLE against a live redis-server: redis-cell's replies, the state it keeps, and
//! every way a call can go wrong without changing anything.

mod support;

use redis::Connection;
use support::{
    bytes_per_key, bytes_per_key_after, changes, error, ints, query, server_millis, snapshot,
    Server, ServerRelease,
};

fn throttle(con: &mut Connection, args: &[&str]) -> Vec<i64> {
    let mut command = vec!["CL.THROTTLE"];
    command.extend_from_slice(args);
    ints(con, &command)
}

#[test]
fn replies_like_redis_cell_on_bursts() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(
        throttle(&mut con, &["user123", "15", "30", "60"]),
        [0, 16, 15, -1, 2]
    );
    assert_eq!(
        throttle(&mut con, &["foo", "4", "1", "1", "6"]),
        [1, 5, 5, -1, 0]
    );
    for (remaining, reset) in [(4, 1), (3, 2), (2, 3), (1, 4), (0, 5)] {
        assert_eq!(
            throttle(&mut con, &["foo", "4", "1", "1"]),
            [0, 5, remaining, -1, reset]
        );
    }
    assert_eq!(throttle(&mut con, &["foo", "4", "1", "1"]), [1, 5, 0, 1, 5]);
    assert_eq!(
        throttle(&mut con, &["e2e", "0", "1", "2", "1"]),
        [0, 1, 0, -1, 2]
    );
    assert_eq!(
        throttle(&mut con, &["e2e", "0", "1", "2", "1"]),
        [1, 1, 0, 2, 2]
    );
    assert_eq!(
        throttle(&mut con, &["k", "5", "5", "3600"]),
        [0, 6, 5, -1, 720]
    );
    // Command names are case-insensitive, as in Redis.
    assert_eq!(
        ints(&mut con, &["cl.throttle", "lower", "4", "1", "1"]),
        [0, 5, 4, -1, 1]
    );
}

#[test]
fn state_is_one_small_string_that_expires_when_the_bucket_is_full() {
    let server = Server::start();
    let mut con = server.connect();
    let before = server_millis(&mut con);
    assert_eq!(
        throttle(&mut con, &["k", "5", "5", "3600"]),
        [0, 6, 5, -1, 720]
    );
    let after = server_millis(&mut con);
    let (value, expire_at) = snapshot(&mut con, b"k").unwrap();
    assert_eq!(value.len(), 14);
    assert_eq!(value[0], 0xF8);
    // The TTL ends at the TAT: now + one emission interval (720 s).
    assert!(
        expire_at >= before + 720_000 && expire_at <= after + 720_001,
        "{expire_at}"
    );
    let kind: String = query(&mut con, &["TYPE", "k"]);
    assert_eq!(kind, "string");
    // Every call that writes moves the expiry with the TAT.
    assert_eq!(
        throttle(&mut con, &["k", "5", "5", "3600", "2"]),
        [0, 6, 3, -1, 2160]
    );
    let (_, later_expire_at) = snapshot(&mut con, b"k").unwrap();
    assert_eq!(later_expire_at, expire_at + 1_440_000);
    let usage: i64 = query(&mut con, &["MEMORY", "USAGE", "k"]);
    // What a 14-byte string with a TTL reports (at most 80 on Redis 7.0 and Valkey 8, x86-64).
    assert!(usage <= 80, "MEMORY USAGE {usage}");
}

#[test]
fn a_limiter_costs_what_any_14_byte_string_with_a_ttl_costs() {
    if support::valgrind::leaves_out_memory_measurement() {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let keys = 100_000;
    // A first request writes a new string; a second rewrites it in place.
    let limiter = bytes_per_key_after(&mut con, keys, 2, |key| {
        support::command(&["CL.THROTTLE", key, "15", "30", "3600"])
    });
    let _: () = query(&mut con, &["FLUSHALL", "SYNC"]);
    let string = bytes_per_key(&mut con, keys, |key| {
        // The state's size: its TAT and the basis it was written under.
        support::command(&["SET", key, "14 bytes state", "PX", "3600000"])
    });
    eprintln!("bytes per key: limiter {limiter:?}, 14-byte string {string}");
    assert!(
        limiter[0] <= string + 1.0,
        "{limiter:?} bytes per limiter, {string} per string"
    );
    let overhead = ServerRelease::of(&mut con).in_place_string_overhead();
    assert!(
        limiter[1] <= string + overhead + 1.0,
        "{limiter:?} bytes per limiter, {string} per string"
    );
}

#[test]
fn the_key_disappears_once_the_bucket_is_full_again() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(
        throttle(&mut con, &["short", "0", "1", "1"]),
        [0, 1, 0, -1, 1]
    );
    let ttl: i64 = query(&mut con, &["PTTL", "short"]);
    assert!(ttl > 0 && ttl <= 1_001, "PTTL {ttl}"); // Expiry is whole ms, rounded up.
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let exists: i64 = query(&mut con, &["EXISTS", "short"]);
    assert_eq!(exists, 0);
    assert_eq!(
        throttle(&mut con, &["short", "0", "1", "1"]),
        [0, 1, 0, -1, 1]
    );
}

#[test]
fn peeks_report_without_writing() {
    let server = Server::start();
    let mut con = server.connect();
    let writes = changes(&mut con);
    assert_eq!(
        throttle(&mut con, &["new", "4", "1", "1", "0"]),
        [0, 5, 5, -1, 0]
    );
    let exists: i64 = query(&mut con, &["EXISTS", "new"]);
    assert_eq!(exists, 0, "a peek created the key");
    assert_eq!(changes(&mut con), writes);

    assert_eq!(
        throttle(&mut con, &["k", "4", "1", "60", "2"]),
        [0, 5, 3, -1, 120]
    );
    let state = snapshot(&mut con, b"k");
    let writes = changes(&mut con);
    assert_eq!(
        throttle(&mut con, &["k", "4", "1", "60", "0"]),
        [0, 5, 3, -1, 120]
    );
    assert_eq!(snapshot(&mut con, b"k"), state);
    assert_eq!(changes(&mut con), writes);
}

#[test]
fn refused_and_oversized_requests_write_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(
        throttle(&mut con, &["k", "1", "1", "60", "2"]),
        [0, 2, 0, -1, 120]
    );
    let state = snapshot(&mut con, b"k");
    let writes = changes(&mut con);
    assert_eq!(
        throttle(&mut con, &["k", "1", "1", "60"]),
        [1, 2, 0, 60, 120]
    );
    // Above max_burst + 1: limited, remaining unchanged, nothing to wait for.
    assert_eq!(
        throttle(&mut con, &["k", "1", "1", "60", "3"]),
        [1, 2, 0, -1, 120]
    );
    assert_eq!(
        throttle(&mut con, &["fresh", "1", "1", "60", "3"]),
        [1, 2, 2, -1, 0]
    );
    assert_eq!(snapshot(&mut con, b"k"), state);
    assert_eq!(snapshot(&mut con, b"fresh"), None);
    assert_eq!(changes(&mut con), writes);
}

#[test]
fn only_admitted_requests_touch_watched_keys() {
    let server = Server::start();
    let mut con = server.connect();
    let mut other = server.connect();
    assert_eq!(
        throttle(&mut con, &["w", "0", "1", "60"]),
        [0, 1, 0, -1, 60]
    );
    // A peek and a refusal from another client leave a WATCH intact.
    let _: () = query(&mut con, &["WATCH", "w"]);
    assert_eq!(
        throttle(&mut other, &["w", "0", "1", "60", "0"]),
        [0, 1, 0, -1, 60]
    );
    assert_eq!(
        throttle(&mut other, &["w", "0", "1", "60"]),
        [1, 1, 0, 60, 60]
    );
    let _: () = query(&mut con, &["MULTI"]);
    let _: () = query(&mut con, &["PING"]);
    let exec: Option<Vec<String>> = query(&mut con, &["EXEC"]);
    assert_eq!(exec, Some(vec!["PONG".to_owned()]));
    // An admitted request changes the key, so the transaction aborts.
    let _: () = query(&mut con, &["WATCH", "w2"]);
    assert_eq!(
        throttle(&mut other, &["w2", "0", "1", "60"]),
        [0, 1, 0, -1, 60]
    );
    let _: () = query(&mut con, &["MULTI"]);
    let _: () = query(&mut con, &["PING"]);
    let exec: Option<Vec<String>> = query(&mut con, &["EXEC"]);
    assert_eq!(exec, None);
}

#[test]
fn runs_inside_transactions_and_scripts() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = query(&mut con, &["MULTI"]);
    let _: () = query(&mut con, &["CL.THROTTLE", "m", "1", "1", "60"]);
    let _: () = query(&mut con, &["CL.THROTTLE", "m", "1", "1", "60"]);
    let _: () = query(&mut con, &["CL.THROTTLE", "m", "1", "1", "60"]);
    let replies: Vec<Vec<i64>> = query(&mut con, &["EXEC"]);
    assert_eq!(
        replies,
        [[0, 2, 1, -1, 60], [0, 2, 0, -1, 120], [1, 2, 0, 60, 120]]
    );
    let script = "return redis.call('CL.THROTTLE', KEYS[1], 1, 1, 60)";
    let reply: Vec<i64> = query(&mut con, &["EVAL", script, "1", "s"]);
    assert_eq!(reply, [0, 2, 1, -1, 60]);
}

#[test]
fn milliseconds_and_microseconds_give_short_periods_and_fine_replies() {
    let server = Server::start();
    let mut con = server.connect();
    // 10 per 10,000 ms with a burst of 2: one every 1,000 ms. Real time passes between
    // calls (milliseconds under load), so later replies are checked within bounds.
    let call = ["m", "1", "10", "10000", "MS"];
    assert_eq!(throttle(&mut con, &call), [0, 2, 1, -1, 1000]);
    let reply = throttle(&mut con, &call);
    assert_eq!(reply[..4], [0, 2, 0, -1]);
    assert!((1_100..=2_000).contains(&reply[4]), "{reply:?}");
    let reply = throttle(&mut con, &call);
    assert_eq!(reply[..3], [1, 2, 0]);
    assert!((100..=1_000).contains(&reply[3]), "{reply:?}");
    // The key expires with the bucket: within 2,000 ms (+1 for the rounding to whole ms).
    let ttl: i64 = query(&mut con, &["PTTL", "m"]);
    assert!(ttl > 0 && ttl <= 2_001, "PTTL {ttl}");
    assert_eq!(
        throttle(&mut con, &["u", "0", "1", "250", "US"]),
        [0, 1, 0, -1, 250]
    );
    // The default unit may be spelled out.
    assert_eq!(
        throttle(&mut con, &["s", "0", "1", "2", "1", "S"]),
        [0, 1, 0, -1, 2]
    );
}

#[test]
fn high_rates_are_exact() {
    let server = Server::start();
    let mut con = server.connect();
    // A million per second (in microseconds), burst 1000: one per microsecond.
    let million = ["fast", "999", "1000000", "1000000", "1", "US"];
    assert_eq!(throttle(&mut con, &million), [0, 1000, 999, -1, 1]);
    for _ in 0..200 {
        let reply = throttle(&mut con, &["fast", "999", "1000000", "1000000", "10", "US"]);
        assert!(reply[2] >= 0 && reply[2] <= 1000, "{reply:?}");
    }
    // In seconds, as redis-cell would be called: remaining never exceeds the limit.
    for _ in 0..50 {
        let reply = throttle(&mut con, &["cell", "5", "1000000", "1"]);
        assert!(reply[2] <= 6 && reply[1] == 6, "{reply:?}");
    }
    // A billion per second: one per nanosecond, still exact.
    let billion = ["faster", "0", "1000000000", "1000000", "1", "US"];
    assert_eq!(throttle(&mut con, &billion), [0, 1, 0, -1, 1]);
    // Beyond 2^24 per nanosecond the rate cannot be honoured.
    assert_eq!(
        error(
            &mut con,
            &["CL.THROTTLE", "x", "0", "9223372036854775807", "1", "US"]
        ),
        "ERR rate too high: count / period exceeds 2^24 per nanosecond"
    );
}

#[test]
fn bad_arguments_get_clear_errors_and_change_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let i64_max = i64::MAX.to_string();
    let cases: &[(&[&str], &str)] = &[
        (&["k"], "ERR wrong number of arguments for 'cl.throttle' command"),
        (&["k", "1", "1"], "ERR wrong number of arguments for 'cl.throttle' command"),
        (&["k", "1.5", "1", "1"], "ERR max_burst is not an integer or out of range"),
        (&["k", "abc", "1", "1"], "ERR max_burst is not an integer or out of range"),
        (&["k", "", "1", "1"], "ERR max_burst is not an integer or out of range"),
        (&["k", "1", "1e3", "1"], "ERR count is not an integer or out of range"),
        (&["k", "1", "1", "0x10"], "ERR period is not an integer or out of range"),
        (&["k", "1", "1", " 1"], "ERR period is not an integer or out of range"),
        (&["k", "1", "1", "99999999999999999999"], "ERR period is not an integer or out of range"),
        (&["k", "1", "1", "1", "1.5"], "ERR quantity is not an integer or out of range"),
        (&["k", "1", "1", "1", "-"], "ERR quantity is not an integer or out of range"),
        (&["k", "-1", "1", "1"], "ERR max_burst must not be negative"),
        (&["k", "1", "-1", "1"], "ERR count must be positive"),
        (&["k", "1", "0", "1"], "ERR count must be positive"),
        (&["k", "1", "1", "-1"], "ERR period must be positive"),
        (&["k", "1", "1", "0"], "ERR period must be positive"),
        (&["k", "1", "1", "1", "-1"], "ERR quantity must not be negative"),
        (
            &["k", &i64_max, "1", "1"],
            "ERR (max_burst + 1) * period / count is too long: the limit is 2^63 nanoseconds (292 years)",
        ),
        (
            &["k", "1", "1", &i64_max],
            "ERR (max_burst + 1) * period / count is too long: the limit is 2^63 nanoseconds (292 years)",
        ),
        (
            &["k", "1", "1", "1", "1", "2"],
            "ERR syntax error. Usage: CL.THROTTLE key max_burst count period [quantity] [S|MS|US] [WARMUP period] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]",
        ),
        (
            &["k", "1", "1", "1", "MS", "1"],
            "ERR syntax error. Usage: CL.THROTTLE key max_burst count period [quantity] [S|MS|US] [WARMUP period] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]",
        ),
        (
            &["k", "1", "1", "1", "1", "MS", "MS"],
            "ERR syntax error. Usage: CL.THROTTLE key max_burst count period [quantity] [S|MS|US] [WARMUP period] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]",
        ),
        (
            &["k", "1", "1", "1", "abc"],
            "ERR syntax error. Usage: CL.THROTTLE key max_burst count period [quantity] [S|MS|US] [WARMUP period] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]",
        ),
        (
            &["k", "1", "1", "1", "1", "minutes"],
            "ERR syntax error. Usage: CL.THROTTLE key max_burst count period [quantity] [S|MS|US] [WARMUP period] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]",
        ),
        (
            &["k", "1", "1", "1", "1", "MS", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j"],
            "ERR syntax error. Usage: CL.THROTTLE key max_burst count period [quantity] [S|MS|US] [WARMUP period] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]",
        ),
    ];
    let writes = changes(&mut con);
    for (args, expected) in cases {
        let mut command = vec!["CL.THROTTLE"];
        command.extend_from_slice(args);
        assert_eq!(error(&mut con, &command), *expected, "{args:?}");
    }
    // Non-UTF-8 and NUL bytes in numbers are errors; in the key, they are just a key.
    let bytes: &[&[u8]] = &[b"CL.THROTTLE", b"k", b"\xff\xfe", b"1", b"1"];
    assert_eq!(
        error(&mut con, bytes),
        "ERR max_burst is not an integer or out of range"
    );
    let bytes: &[&[u8]] = &[b"CL.THROTTLE", b"k", b"1", b"1\0", b"1"];
    assert_eq!(
        error(&mut con, bytes),
        "ERR count is not an integer or out of range"
    );
    let exists: i64 = query(&mut con, &["EXISTS", "k"]);
    assert_eq!(exists, 0);
    assert_eq!(changes(&mut con), writes);
    let binary_key: &[&[u8]] = &[b"CL.THROTTLE", b"\xff\x00key\r\n", b"1", b"1", b"1"];
    assert_eq!(ints(&mut con, binary_key), [0, 2, 1, -1, 1]);
}

#[test]
fn reads_the_state_redis_cell_left_behind() {
    let server = Server::start();
    let mut con = server.connect();
    // redis-cell keeps the TAT as decimal nanoseconds: here, 3 s from now.
    let tat_nanos = (server_millis(&mut con) + 3_000) as u128 * 1_000_000;
    let _: () = query(
        &mut con,
        &["SET", "cell", &tat_nanos.to_string(), "PX", "3000"],
    );
    // A peek reads it and leaves it as it is.
    assert_eq!(
        throttle(&mut con, &["cell", "4", "1", "1", "0"]),
        [0, 5, 2, -1, 3]
    );
    let value: Vec<u8> = query(&mut con, &["GET", "cell"]);
    assert_eq!(value, tat_nanos.to_string().as_bytes());
    // An admitted request continues from it and rewrites it in this module's layout.
    assert_eq!(
        throttle(&mut con, &["cell", "4", "1", "1"]),
        [0, 5, 1, -1, 4]
    );
    let (value, expire_at) = snapshot(&mut con, b"cell").unwrap();
    assert_eq!((value.len(), value[0]), (14, 0xF8));
    assert_eq!(expire_at, (tat_nanos / 1_000_000) as i64 + 1_000);
}

#[test]
fn keys_of_other_types_are_wrongtype_and_left_alone() {
    let server = Server::start();
    let mut con = server.connect();
    let setup: &[&[&[u8]]] = &[
        &[b"SET", b"text", b"hello"],
        &[b"SET", b"number", b"123456789012"],
        &[b"SET", b"nineteen", b"12345678901234567-9"],
        &[b"SET", b"twelve", b"hello world!"],
        &[
            b"SET",
            b"other-tag",
            b"\xf9\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
        ],
        &[b"SET", b"empty", b""],
        &[b"RPUSH", b"list", b"a"],
        &[b"HSET", b"hash", b"f", b"v"],
        &[b"SADD", b"set", b"m"],
        &[b"ZADD", b"zset", b"1", b"m"],
        &[b"XADD", b"stream", b"*", b"f", b"v"],
    ];
    for command in setup {
        let _: redis::Value = query(&mut con, command);
    }
    let _: () = query(&mut con, &["PEXPIRE", "text", "100000"]);
    let keys = [
        "text",
        "number",
        "twelve",
        "other-tag",
        "empty",
        "list",
        "hash",
        "set",
        "zset",
        "stream",
    ];
    let dumps: Vec<Vec<u8>> = keys
        .iter()
        .map(|key| query(&mut con, &["DUMP", key]))
        .collect();
    let ttl_before: i64 = query(&mut con, &["PEXPIRETIME", "text"]);
    for key in keys {
        for quantity in ["1", "0", "100"] {
            assert_eq!(
                error(&mut con, &["CL.THROTTLE", key, "5", "1", "1", quantity]),
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                "{key}"
            );
        }
    }
    let after: Vec<Vec<u8>> = keys
        .iter()
        .map(|key| query(&mut con, &["DUMP", key]))
        .collect();
    assert_eq!(after, dumps);
    let ttl_after: i64 = query(&mut con, &["PEXPIRETIME", "text"]);
    assert_eq!(ttl_after, ttl_before);
}

#[test]
fn command_info_tells_the_truth() {
    let server = Server::start();
    let mut con = server.connect();
    let info: Vec<redis::Value> = query(&mut con, &["COMMAND", "INFO", "CL.THROTTLE"]);
    let redis::Value::Array(fields) = &info[0] else {
        panic!("no COMMAND INFO: {info:?}")
    };
    let name: String = redis::from_redis_value(fields[0].clone()).unwrap();
    let arity: i64 = redis::from_redis_value(fields[1].clone()).unwrap();
    let flags: Vec<String> = redis::from_redis_value(fields[2].clone()).unwrap();
    let positions: Vec<i64> = fields[3..6]
        .iter()
        .map(|field| redis::from_redis_value(field.clone()).unwrap())
        .collect();
    assert_eq!(name, "cl.throttle");
    assert_eq!(arity, -5);
    for flag in ["write", "fast"] {
        assert!(flags.contains(&flag.to_owned()), "{flags:?}");
    }
    assert_eq!(positions, [1, 1, 1]);
    let key_specs = format!("{:?}", fields[8]);
    for expected in ["RW", "access", "update", "index", "range"] {
        assert!(key_specs.contains(expected), "{key_specs}");
    }
    let keys: Vec<String> = query(
        &mut con,
        &[
            "COMMAND",
            "GETKEYS",
            "CL.THROTTLE",
            "user:1",
            "1",
            "1",
            "1",
            "MS",
        ],
    );
    assert_eq!(keys, ["user:1"]);
    let docs = format!(
        "{:?}",
        query::<redis::Value, _>(&mut con, &["COMMAND", "DOCS", "CL.THROTTLE"])
    );
    for expected in [
        "max_burst",
        "count",
        "period",
        "quantity",
        "optional",
        "MS",
        "O(1)",
    ] {
        assert!(docs.contains(expected), "{docs}");
    }
}
