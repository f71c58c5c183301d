//! RL.WINDOW against a live redis-server: the three algorithms at a window boundary, the
//! state they keep, and every way a call can go wrong without changing anything.

mod support;

use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Connection;
use support::{
    bytes_per_key, bytes_per_key_after, changes, error, ints, query, server_millis, snapshot,
    Server, ServerRelease,
};

fn window(con: &mut Connection, args: &[&str]) -> Vec<i64> {
    let mut command = vec!["RL.WINDOW"];
    command.extend_from_slice(args);
    ints(con, &command)
}

const USAGE: &str =
    "ERR syntax error. Usage: RL.WINDOW key limit window [quantity] [S|MS|US] [FIXED|SLIDING|BUCKETS n|ANCHORED] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn local_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn sleep_until(millis: i64) {
    let wait = millis - local_millis();
    if wait > 0 {
        thread::sleep(Duration::from_millis(wait as u64));
    }
}

/// How many of 10 requests per limiter, sent at once, each admits.
fn admitted(con: &mut Connection, limiters: &[&[&str]]) -> Vec<usize> {
    let mut pipe = redis::pipe();
    for limiter in limiters {
        for _ in 0..10 {
            pipe.add_command(support::command(limiter));
        }
    }
    let replies: Vec<Vec<i64>> = pipe.query(con).unwrap();
    replies
        .chunks(10)
        .map(|chunk| chunk.iter().filter(|reply| reply[0] == 0).count())
        .collect()
}

#[test]
fn at_a_window_boundary_fixed_admits_twice_the_limit_and_the_others_do_not() {
    let server = Server::start();
    let mut con = server.connect();
    // 10 per 2 s, each way.
    let limiters: [&[&str]; 5] = [
        &["RL.WINDOW", "fixed", "10", "2", "FIXED"],
        &["RL.WINDOW", "sliding", "10", "2", "SLIDING"],
        &["RL.WINDOW", "buckets", "10", "2", "BUCKETS", "10"],
        &["RL.LOG", "log", "10", "2"],
        &["CL.THROTTLE", "gcra", "9", "10", "2"],
    ];
    // The server's clock is this machine's: the next 2 s boundary at least 400 ms away.
    let now = server_millis(&mut con);
    let boundary = (now + 400) / 2_000 * 2_000 + 2_000;
    sleep_until(boundary - 150);
    let before = admitted(&mut con, &limiters);
    sleep_until(boundary + 150);
    // What SLIDING and CL.THROTTLE still have room for, as the server sees it just before
    // the requests: on a busy machine the two batches may land closer or further apart than
    // 300 ms, and those two refill with time.
    let mut pipe = redis::pipe();
    pipe.add_command(support::command(&[
        "RL.WINDOW_RO",
        "sliding",
        "10",
        "2",
        "0",
        "SLIDING",
    ]))
    .add_command(support::command(&[
        "CL.THROTTLE_RO",
        "gcra",
        "9",
        "10",
        "2",
        "0",
    ]));
    let room: Vec<Vec<i64>> = pipe.query(&mut con).unwrap();
    let after = admitted(&mut con, &limiters);
    eprintln!("admitted before the boundary {before:?}, after it {after:?}, room {room:?}");
    assert_eq!(before, [10; 5]);
    // FIXED starts over; SLIDING still weighs the previous 10 (at 9.25 150 ms in, one more
    // fitting at 200 ms); the 10 buckets and the log still hold all 10; the bucket of
    // CL.THROTTLE refills one request per 200 ms. The two that refill admit what the server
    // said they had room for, or one more that fit between the peek and the requests.
    assert_eq!(after[0], 10);
    assert_eq!(after[2..4], [0, 0]);
    for (index, standing) in [(1, &room[0]), (4, &room[1])] {
        let room = standing[2] as usize;
        assert!(
            (room..=room + 1).contains(&after[index]) && after[index] < 10,
            "{}: {} admitted, room {room}",
            limiters[index][1],
            after[index]
        );
    }
}

#[test]
fn each_algorithm_replies_and_keeps_one_small_key() {
    let server = Server::start();
    let mut con = server.connect();
    let cases: [(&str, &[&str], usize, u8); 3] = [
        ("fixed", &["FIXED"], 9, 0xF9),
        ("sliding", &[], 10, 0xFA),
        ("buckets", &["BUCKETS", "60"], 32, 0xFC),
    ];
    for (key, algorithm, length, tag) in cases {
        let before = server_millis(&mut con);
        let mut args = vec![key, "100", "60"];
        args.extend_from_slice(algorithm);
        let reply = window(&mut con, &args);
        let after = server_millis(&mut con);
        assert_eq!(reply[..4], [0, 100, 99, -1], "{key}");
        assert!((1..=120).contains(&reply[4]), "{key}: {reply:?}");
        let (value, expire_at) = snapshot(&mut con, key.as_bytes()).unwrap();
        assert_eq!((value.len(), value[0]), (length, tag), "{key}");
        // The key lasts until its count leaves the window: the end of this 60 s window
        // (FIXED; the end of one of its 1 s buckets for BUCKETS 60, a window later), or
        // of the next one (SLIDING).
        let window_end = |millis: i64| millis / 60_000 * 60_000 + 60_000;
        let expected = match key {
            "fixed" => window_end(before)..=window_end(after),
            "sliding" => window_end(before) + 60_000..=window_end(after) + 60_000,
            _ => before + 59_000..=after + 60_000,
        };
        assert!(
            expected.contains(&expire_at),
            "{key}: {expire_at} {expected:?}"
        );
        assert_eq!(expire_at % 1_000, 0, "{key}");
    }
    // The default algorithm is SLIDING, which reads the key SLIDING wrote.
    let reply = window(&mut con, &["sliding", "100", "60", "SLIDING"]);
    assert_eq!(reply[..3], [0, 100, 98]);
}

#[test]
fn sub_second_windows_in_milliseconds_and_microseconds() {
    let server = Server::start();
    let mut con = server.connect();
    let admitted = window(&mut con, &["ms", "2", "60000", "2", "FIXED", "MS"]);
    assert_eq!(admitted[..4], [0, 2, 0, -1]);
    let limited = window(&mut con, &["ms", "2", "60000", "FIXED", "MS"]);
    assert_eq!(limited[..3], [1, 2, 0]);
    assert!(
        limited[3] <= admitted[4] && limited[3] == limited[4],
        "{limited:?}"
    );
    let reply = window(&mut con, &["us", "1", "250000", "US", "BUCKETS", "5"]);
    assert_eq!(reply[..4], [0, 1, 0, -1]);
    assert!((200_000..=250_000).contains(&reply[4]), "{reply:?}");
    // Waiting the reply's retry_after is enough.
    let retry = window(&mut con, &["us", "1", "250000", "US", "BUCKETS", "5"])[3];
    thread::sleep(Duration::from_micros(retry as u64));
    assert_eq!(
        window(&mut con, &["us", "1", "250000", "US", "BUCKETS", "5"])[0],
        0
    );
}

#[test]
fn peeks_and_oversized_requests_write_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let writes = changes(&mut con);
    for algorithm in [&["FIXED"][..], &["SLIDING"], &["BUCKETS", "6"]] {
        let mut peek = vec!["new", "5", "60", "0"];
        peek.extend_from_slice(algorithm);
        assert_eq!(window(&mut con, &peek), [0, 5, 5, -1, 0]);
        let mut oversized = vec!["new", "5", "60", "6"];
        oversized.extend_from_slice(algorithm);
        assert_eq!(window(&mut con, &oversized), [1, 5, 5, -1, 0]);
    }
    let exists: i64 = query(&mut con, &["EXISTS", "new"]);
    assert_eq!(exists, 0);
    assert_eq!(changes(&mut con), writes);
    // On an existing key, a peek and a refusal leave bytes and expiry as they were.
    window(&mut con, &["k", "5", "60", "5", "FIXED"]);
    let state = snapshot(&mut con, b"k");
    let writes = changes(&mut con);
    assert_eq!(
        window(&mut con, &["k", "5", "60", "0", "FIXED"])[..4],
        [0, 5, 0, -1]
    );
    assert_eq!(
        window(&mut con, &["k", "5", "60", "1", "FIXED"])[..3],
        [1, 5, 0]
    );
    assert_eq!(
        window(&mut con, &["k", "5", "60", "9", "FIXED"])[..4],
        [1, 5, 0, -1]
    );
    assert_eq!(snapshot(&mut con, b"k"), state);
    assert_eq!(changes(&mut con), writes);
}

#[test]
fn bad_arguments_get_clear_errors_and_change_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let i64_max = i64::MAX.to_string();
    let arity = "ERR wrong number of arguments for 'rl.window' command";
    let cases: &[(&[&str], &str)] = &[
        (&["k"], arity),
        (&["k", "10"], arity),
        (&["k", "ten", "60"], "ERR limit is not an integer or out of range"),
        (&["k", "1.0", "60"], "ERR limit is not an integer or out of range"),
        (&["k", "10", "60s"], "ERR window is not an integer or out of range"),
        (&["k", "10", ""], "ERR window is not an integer or out of range"),
        (&["k", "0", "60"], "ERR limit must be positive"),
        (&["k", "-5", "60"], "ERR limit must be positive"),
        (&["k", "10", "0"], "ERR window must be positive"),
        (&["k", "10", "-1"], "ERR window must be positive"),
        (&["k", "10", "60", "-1"], "ERR quantity must not be negative"),
        (&["k", "10", "60", "1e2"], "ERR quantity is not an integer or out of range"),
        (&["k", "10", "60", "BUCKETS", "0"], "ERR BUCKETS must be an integer from 1 to 3600"),
        (&["k", "10", "60", "BUCKETS", "3601"], "ERR BUCKETS must be an integer from 1 to 3600"),
        (&["k", "10", "60", "BUCKETS", "x"], "ERR BUCKETS must be an integer from 1 to 3600"),
        (&["k", "10", "60", "BUCKETS"], USAGE),
        (&["k", "10", "5", "US", "BUCKETS", "6"], "ERR window / BUCKETS must be at least 1 microsecond"),
        (
            &["k", "10", &i64_max],
            "ERR window is too long: the limit is 2^63 nanoseconds (292 years)",
        ),
        (
            &["k", "10", "9223372036854775", "US", "BUCKETS", "3600"],
            "ERR window is too long for BUCKETS: window * BUCKETS must stay below 2^63 microseconds",
        ),
        (&["k", "10", "60", "FIXED", "SLIDING"], USAGE),
        (&["k", "10", "60", "fixed", "FIXED"], USAGE),
        (&["k", "10", "60", "MS", "S"], USAGE),
        (&["k", "10", "60", "FIXED", "1"], USAGE),
        (&["k", "10", "60", "SLIDNG"], USAGE),
        (&["k", "10", "60", "1", "2"], USAGE),
        (&["k", "1", "1", "1", "MS", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"], USAGE),
    ];
    let writes = changes(&mut con);
    for (args, expected) in cases {
        let mut command = vec!["RL.WINDOW"];
        command.extend_from_slice(args);
        assert_eq!(error(&mut con, &command), *expected, "{args:?}");
    }
    let bytes: &[&[u8]] = &[b"RL.WINDOW", b"k", b"1\xff", b"60"];
    assert_eq!(
        error(&mut con, bytes),
        "ERR limit is not an integer or out of range"
    );
    let bytes: &[&[u8]] = &[b"RL.WINDOW", b"k", b"10", b"60", b"\x00"];
    assert_eq!(error(&mut con, bytes), USAGE);
    let exists: i64 = query(&mut con, &["EXISTS", "k"]);
    assert_eq!(exists, 0);
    assert_eq!(changes(&mut con), writes);
}

#[test]
fn keys_of_other_types_commands_and_algorithms_are_refused_and_left_alone() {
    let server = Server::start();
    let mut con = server.connect();
    let setup: &[&[&str]] = &[
        &["SET", "text", "hello"],
        &["SET", "number", "123456789012"],
        &["RPUSH", "list", "a"],
        &["HSET", "hash", "f", "v"],
        &["SADD", "set", "m"],
        &["ZADD", "zset", "1", "m"],
        &["XADD", "stream", "*", "f", "v"],
        &["CL.THROTTLE", "gcra", "5", "1", "60"],
        &["RL.WINDOW", "fixed", "5", "60", "FIXED"],
        &["RL.WINDOW", "sliding", "5", "60", "SLIDING"],
        &["RL.WINDOW", "buckets", "5", "60", "BUCKETS", "4"],
    ];
    for command in setup {
        let _: redis::Value = query(&mut con, command);
    }
    let keys = [
        "text", "number", "list", "hash", "set", "zset", "stream", "gcra", "fixed", "sliding",
        "buckets",
    ];
    let dumps: Vec<Vec<u8>> = keys
        .iter()
        .map(|key| query(&mut con, &["DUMP", key]))
        .collect();
    let other_algorithm = "WRONGTYPE the key holds the state of another RL.WINDOW algorithm";
    let cases: &[(&str, &[&str], &str)] = &[
        ("text", &["FIXED"], WRONGTYPE),
        ("number", &["SLIDING"], WRONGTYPE),
        ("list", &["FIXED"], WRONGTYPE),
        ("hash", &["SLIDING"], WRONGTYPE),
        ("set", &["BUCKETS", "4"], WRONGTYPE),
        ("zset", &["FIXED"], WRONGTYPE),
        ("stream", &["FIXED"], WRONGTYPE),
        ("gcra", &["FIXED"], WRONGTYPE),
        ("gcra", &["BUCKETS", "4"], WRONGTYPE),
        ("fixed", &["SLIDING"], other_algorithm),
        ("fixed", &["BUCKETS", "1"], other_algorithm),
        ("sliding", &["FIXED"], other_algorithm),
        ("buckets", &[], other_algorithm),
    ];
    for (key, algorithm, expected) in cases {
        for quantity in ["1", "0", "100"] {
            let mut command = vec!["RL.WINDOW", key, "5", "60", quantity];
            command.extend_from_slice(algorithm);
            assert_eq!(error(&mut con, &command), *expected, "{command:?}");
        }
    }
    for key in ["fixed", "sliding", "buckets"] {
        assert_eq!(
            error(&mut con, &["CL.THROTTLE", key, "5", "1", "60"]),
            WRONGTYPE
        );
    }
    let after: Vec<Vec<u8>> = keys
        .iter()
        .map(|key| query(&mut con, &["DUMP", key]))
        .collect();
    assert_eq!(after, dumps);
}

#[test]
fn a_fixed_or_sliding_limiter_costs_what_a_short_string_with_a_ttl_costs() {
    if support::valgrind::leaves_out_memory_measurement() {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let keys = 50_000;
    // A first request writes a new string; a second rewrites it in place.
    let mut measure = |args: &'static [&'static str]| {
        let bytes = bytes_per_key_after(&mut con, keys, 2, |key| {
            let mut command = support::command(&["RL.WINDOW", key]);
            for arg in args {
                command.arg(*arg);
            }
            command
        });
        let _: () = query(&mut con, &["FLUSHALL", "SYNC"]);
        bytes
    };
    // 12 and 11 bytes: the header, the limit and the counts, in 2 bytes each and in 1.
    let fixed = measure(&["1000", "3600", "FIXED"]);
    let sliding = measure(&["100", "3600", "SLIDING"]);
    let buckets = measure(&["100", "3600", "BUCKETS", "60"]);
    let string = bytes_per_key(&mut con, keys, |key| {
        support::command(&["SET", key, "twelve bytes", "PX", "3600000"])
    });
    eprintln!("bytes per key: FIXED {fixed:?}, SLIDING {sliding:?}, BUCKETS 60 {buckets:?}, 12-byte string {string}");
    // Values of up to 12 bytes take the allocation a 12-byte string takes.
    let overhead = ServerRelease::of(&mut con).in_place_string_overhead();
    for (name, bytes) in [("FIXED", &fixed), ("SLIDING", &sliding)] {
        assert!(
            bytes[0] <= string + 1.0,
            "{name} {bytes:?}, string {string}"
        );
        assert!(
            bytes[1] <= string + overhead + 1.0,
            "{name} {bytes:?}, string {string}"
        );
    }
    // BUCKETS 60 with one bucket counted: 40 bytes, an allocation class or two up from 12
    // (32 more on Redis 7.0).
    assert!(
        buckets[0] <= string + 33.0 && buckets[1] <= string + overhead + 33.0,
        "BUCKETS 60 {buckets:?}, string {string}"
    );
}

#[test]
fn command_info_and_docs_describe_the_command() {
    let server = Server::start();
    support::assert_command_metadata(
        &mut server.connect(),
        &[
            "rl.window",
            "int(-4)",
            "write",
            "fast",
            "RW",
            "access",
            "update",
        ],
        &["RL.WINDOW", "user:1", "10", "60", "BUCKETS", "6"],
        &[
            "limit",
            "window",
            "quantity",
            "FIXED",
            "SLIDING",
            "BUCKETS",
            "optional",
            "O(N) for BUCKETS N",
        ],
    );
}

/// A BUCKETS state with many buckets counted is changed in place a few bytes at a time
/// (`SETRANGE`, and `PEXPIREAT` when its end moves): a replica with the module, one without
/// it and the AOF replayed all hold the master's bytes and expiry.
#[test]
fn a_long_bucket_log_travels_as_patches_and_every_copy_agrees() {
    let master = Server::builder().aof().start();
    let replica = Server::builder().replica_of(&master).start();
    let bare = Server::builder()
        .without_module()
        .replica_of(&master)
        .start();
    replica.wait_for_replication_link();
    bare.wait_for_replication_link();
    let mut con = master.connect();
    // 100 per minute in 3,600 buckets of 16.7 ms: 24 requests 20 ms apart count in 24
    // buckets, a value of 32 + 23 * 3 = 101 bytes.
    let limiter = ["big", "100", "60000", "MS", "BUCKETS", "3600"];
    for i in 0..24 {
        let reply = window(&mut con, &limiter);
        assert_eq!(reply[..3], [0, 100, 99 - i], "request {i}");
        thread::sleep(Duration::from_millis(20));
    }
    // A refund comes off the newest bucket, in place too.
    let refund = [
        "big", "100", "60000", "1", "MS", "BUCKETS", "3600", "REFUND",
    ];
    assert_eq!(window(&mut con, &refund)[..3], [0, 100, 77]);
    support::wait_for_replicas(&mut con, 2);
    let on_master = snapshot(&mut con, b"big").unwrap();
    assert!(on_master.0.len() > 64, "{} bytes", on_master.0.len());
    assert_eq!(snapshot(&mut replica.connect(), b"big").unwrap(), on_master);
    assert_eq!(snapshot(&mut bare.connect(), b"big").unwrap(), on_master);
    // The replica received patches: SETRANGE calls, the first write's SET aside.
    let stats: String = query(&mut bare.connect(), &["INFO", "commandstats"]);
    let calls = |command: &str| {
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse::<i64>().unwrap())
    };
    assert!(calls("setrange") >= 10, "{stats}");
    assert!(calls("pexpireat") >= 10, "{stats}");
    // The AOF replays to the same bytes and expiry.
    let _: () = query(&mut con, &["DEBUG", "LOADAOF"]);
    assert_eq!(snapshot(&mut con, b"big").unwrap(), on_master);
}
