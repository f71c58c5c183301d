//! REFUND, BLOCK and the read-only `_RO` variants, for every command, on live servers:
//! exact replies, what is written (and what is not), replicas and the AOF after refunds and
//! blocks, read-only replicas and read-only ACL users, and keys written before these
//! options existed.

mod support;

use std::thread;
use std::time::Duration;

use redis::Connection;
use support::copies::assert_copies_agree;
use support::workload::state;
use support::{changes, error, ints, query, server_millis, Server};

fn exists(con: &mut Connection, key: &str) -> bool {
    query::<i64, _>(con, &["EXISTS", key]) == 1
}

/// A call: `head`, then `tail` words.
fn call<'a>(head: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    [head, tail].concat()
}

#[test]
fn refunds_give_back_what_was_taken_and_an_emptied_key_goes() {
    let server = Server::start();
    let mut con = server.connect();
    // CL.THROTTLE: bursts of 5, one a minute.
    let gcra = ["CL.THROTTLE", "g", "4", "1", "60"];
    assert_eq!(ints(&mut con, &call(&gcra, &["3"])), [0, 5, 2, -1, 180]);
    assert_eq!(
        ints(&mut con, &call(&gcra, &["2", "REFUND"])),
        [0, 5, 4, -1, 60]
    );
    assert_eq!(
        ints(&mut con, &call(&gcra, &["10", "refund"])),
        [0, 5, 5, -1, 0]
    );
    assert!(!exists(&mut con, "g"), "an emptied limiter is deleted");
    // RL.LOG: the newest entries go first.
    let log = ["RL.LOG", "l", "5", "60"];
    assert_eq!(ints(&mut con, &call(&log, &["3"])), [0, 5, 2, -1, 60]);
    assert_eq!(
        ints(&mut con, &call(&log, &["1", "REFUND"])),
        [0, 5, 3, -1, 60]
    );
    assert_eq!(
        ints(&mut con, &call(&log, &["9", "REFUND"])),
        [0, 5, 5, -1, 0]
    );
    assert!(!exists(&mut con, "l"));
    // RL.WINDOW, each algorithm: never below zero.
    for algorithm in [&["FIXED"][..], &["SLIDING"], &["BUCKETS", "24"]] {
        let window = call(&["RL.WINDOW", "w", "5", "86400", "3"], algorithm);
        assert_eq!(ints(&mut con, &window)[..4], [0, 5, 2, -1], "{algorithm:?}");
        let refund = call(
            &["RL.WINDOW", "w", "5", "86400", "2"],
            &call(algorithm, &["REFUND"]),
        );
        assert_eq!(ints(&mut con, &refund)[..4], [0, 5, 4, -1], "{algorithm:?}");
        let refund = call(
            &["RL.WINDOW", "w", "5", "86400", "7"],
            &call(algorithm, &["REFUND"]),
        );
        assert_eq!(ints(&mut con, &refund), [0, 5, 5, -1, 0], "{algorithm:?}");
        assert!(!exists(&mut con, "w"), "{algorithm:?}");
    }
    // RL.ALL: every limiter gives back.
    let all = [
        "RL.ALL", "2", "{a}:1", "{a}:2", "THROTTLE", "4", "1", "60", "LOG", "5", "60",
    ];
    assert_eq!(ints(&mut con, &call(&all, &["4"])), [0, 5, 1, -1, 240]);
    assert_eq!(
        ints(&mut con, &call(&all, &["2", "REFUND"])),
        [0, 5, 3, -1, 120]
    );
    assert_eq!(
        ints(&mut con, &["RL.LOG_RO", "{a}:2", "5", "60", "0"]),
        [0, 5, 3, -1, 60]
    );
}

#[test]
fn a_refund_on_a_missing_key_or_of_nothing_writes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let writes = changes(&mut con);
    for command in [
        &["CL.THROTTLE", "m", "4", "1", "60", "3", "REFUND"][..],
        &["RL.WINDOW", "m", "5", "60", "3", "FIXED", "REFUND"],
        &["RL.LOG", "m", "5", "60", "3", "REFUND"],
        &["RL.ALL", "1", "m", "LOG", "5", "60", "REFUND"],
    ] {
        assert_eq!(ints(&mut con, command), [0, 5, 5, -1, 0], "{command:?}");
        assert!(!exists(&mut con, "m"), "{command:?}");
    }
    ints(&mut con, &["RL.LOG", "held", "5", "60"]);
    let before = state(&mut con, "held");
    let writes_after_take = changes(&mut con);
    assert_eq!(
        ints(&mut con, &["RL.LOG", "held", "5", "60", "0", "REFUND"]),
        [0, 5, 4, -1, 60]
    );
    assert_eq!(state(&mut con, "held"), before);
    assert_eq!(changes(&mut con), writes_after_take);
    assert_eq!(writes_after_take, writes + 1);
}

#[test]
fn a_login_limiter_blocks_for_fifteen_minutes_after_too_many_attempts() {
    let server = Server::start();
    let mut con = server.connect();
    let attempt = ["RL.LOG", "login:alice", "3", "60", "BLOCK", "900"];
    for remaining in [2, 1, 0] {
        assert_eq!(ints(&mut con, &attempt), [0, 3, remaining, -1, 60]);
    }
    // Refused because the limit is used up: blocked for 15 minutes from now, this reply too.
    assert_eq!(ints(&mut con, &attempt), [1, 3, 0, 900, 900]);
    let ttl: i64 = query(&mut con, &["PTTL", "login:alice"]);
    assert!((899_000..=900_001).contains(&ttl), "PTTL {ttl}");
    // Everything is refused meanwhile: peeks, calls without BLOCK, dry runs.
    for call in [
        &["RL.LOG", "login:alice", "3", "60", "0"][..],
        &["RL.LOG", "login:alice", "3", "60"],
        &["RL.LOG_RO", "login:alice", "3", "60"],
        &["RL.LOG", "login:alice", "3", "60", "BLOCK", "5000"],
    ] {
        assert_eq!(ints(&mut con, call), [1, 3, 0, 900, 900], "{call:?}");
    }
    // Refused calls did not extend the block.
    let later: i64 = query(&mut con, &["PTTL", "login:alice"]);
    assert!(later <= ttl, "PTTL {ttl} became {later}");
}

#[test]
fn every_algorithm_blocks_exactly_for_its_duration() {
    // Every duration of the test scaled up under valgrind, where a call takes milliseconds:
    // the same checks, at a pace the slowed server keeps.
    let scale = support::valgrind::time_scale();
    let ms = |millis: i64| millis * scale;
    let server = Server::start();
    let mut con = server.connect();
    // The block far longer than a window, so that a machine slow between two calls still
    // meets every limiter refilled and every block in force.
    let (window, period, block) = (
        ms(100).to_string(),
        ms(1_000).to_string(),
        ms(2_000).to_string(),
    );
    let limiters: [Vec<&str>; 6] = [
        vec!["CL.THROTTLE", "b:gcra", "0", "10", &period],
        vec!["RL.WINDOW", "b:fixed", "1", &window, "FIXED"],
        vec!["RL.WINDOW", "b:sliding", "1", &window, "SLIDING"],
        vec!["RL.WINDOW", "b:buckets", "1", &window, "BUCKETS", "4"],
        vec!["RL.LOG", "b:log", "1", &window],
        vec!["RL.ALL", "1", "b:all", "LOG", "1", &window],
    ];
    let blocking = |limiter: &Vec<&str>| -> Vec<String> {
        let options = ["MS", "BLOCK", &block];
        limiter
            .iter()
            .chain(&options)
            .map(|word| word.to_string())
            .collect()
    };
    let start = std::time::Instant::now();
    let elapsed = || start.elapsed().as_millis() as i64;
    // When each block had started by (ms since `start`): under valgrind the calls take long
    // enough that the later blocks start well after the first.
    let mut blocked_by = Vec::new();
    for limiter in &limiters {
        assert_eq!(ints(&mut con, &blocking(limiter))[0], 0, "{limiter:?}");
        // Refused and blocked (a FIXED window may roll over between two calls: a third is
        // then refused).
        let reply = (0..3)
            .map(|_| ints(&mut con, &blocking(limiter)))
            .find(|reply| reply[0] == 1)
            .expect("a refusal");
        blocked_by.push(elapsed());
        assert_eq!(reply[..3], [1, 1, 0], "{limiter:?}");
        assert!(
            (ms(1_990)..=ms(2_000)).contains(&reply[3]),
            "{limiter:?}: {reply:?}"
        );
    }
    // After 250 ms every limiter alone has refilled; the blocks still refuse.
    thread::sleep(Duration::from_millis((ms(250) - elapsed()).max(0) as u64));
    for (limiter, blocked_by) in limiters.iter().zip(&blocked_by) {
        let asked_at = elapsed();
        let reply = ints(&mut con, &[&limiter[..], &["MS"]].concat());
        assert_eq!(reply[..3], [1, 1, 0], "{limiter:?}");
        // What is left of the block: at most its length less the time since it had
        // started (1 ms for rounding up), the time between the two calls as the test saw it
        // being at least what the server saw.
        let left = ms(2_000) - (asked_at - blocked_by) + 1;
        assert!(
            reply[3] > 0 && reply[3] <= left,
            "{limiter:?}: {reply:?}, {left} ms left at most"
        );
    }
    // Once they end (each by its start as the test saw it, at the latest), each limiter is
    // itself again.
    let ended = blocked_by.iter().max().unwrap() + ms(2_000) + 5;
    thread::sleep(Duration::from_millis((ended - elapsed()).max(0) as u64));
    for limiter in &limiters {
        assert_eq!(
            ints(&mut con, &[&limiter[..], &["MS"]].concat())[..3],
            [0, 1, 0],
            "{limiter:?}"
        );
    }
}

/// A block starts from none: what the key counted is dropped when the block starts, so the
/// refusal that starts it waits exactly the block, the key lives exactly as long, and once it
/// ends the key admits a full limit again, though the limit's own window (a minute) is far
/// from over.
#[test]
fn a_block_starts_from_none_and_its_end_admits_a_full_limit() {
    let server = Server::start();
    let mut con = server.connect();
    let limiters: [&[&str]; 7] = [
        &["CL.THROTTLE", "n:gcra", "1", "1", "60000"],
        &["RL.WINDOW", "n:fixed", "2", "60000", "FIXED"],
        &["RL.WINDOW", "n:sliding", "2", "60000", "SLIDING"],
        &["RL.WINDOW", "n:buckets", "2", "60000", "BUCKETS", "4"],
        &["RL.WINDOW", "n:anchored", "2", "60000", "ANCHORED"],
        &["RL.LOG", "n:log", "2", "60000"],
        &["RL.ALL", "1", "n:all", "LOG", "2", "60000"],
    ];
    // 300 ms, scaled up under valgrind. What is asserted while the block should stand is
    // asserted only of replies back within it from before the call that started it: a
    // server slower than that may have answered after the block ended (then the key is
    // gone and a call admitted, as the block's end says).
    let block = 300 * support::valgrind::time_scale();
    let block_arg = block.to_string();
    let blocking = |limiter: &[&str]| -> Vec<String> {
        [limiter, &["MS", "BLOCK", &block_arg]]
            .concat()
            .iter()
            .map(|word| word.to_string())
            .collect()
    };
    let key = |limiter: &[&str]| limiter[if limiter[0] == "RL.ALL" { 2 } else { 1 }].to_owned();
    for limiter in limiters {
        // Until refused (a FIXED window may roll over between two calls).
        let (refused, started) = (0..5)
            .map(|_| {
                (
                    std::time::Instant::now(),
                    ints(&mut con, &blocking(limiter)),
                )
            })
            .find(|(_, reply)| reply[0] == 1)
            .map(|(started, reply)| (reply, started))
            .expect("a refusal");
        assert_eq!(refused, [1, 2, 0, block, block], "{limiter:?}");
        let within = |started: std::time::Instant| started.elapsed().as_millis() < block as u128;
        let pttl: i64 = query(&mut con, &["PTTL", &key(limiter)]);
        // The block's end, in µs, rounded up to the millisecond.
        assert!(pttl <= block + 1, "{limiter:?}: PTTL {pttl}");
        if within(started) {
            assert!(pttl >= 1, "{limiter:?}: PTTL {pttl}");
        }
        // Refused while it lasts, and nothing else waits behind it.
        let during = ints(&mut con, &[limiter, &["MS"]].concat());
        if within(started) {
            assert_eq!(during[..3], [1, 2, 0], "{limiter:?}");
            assert!(
                during[3] <= block && during[3] == during[4],
                "{limiter:?}: {during:?}"
            );
        }
        // The wait the server gave, then a full limit (the call above counted in it if the
        // block had ended).
        thread::sleep(Duration::from_millis(during[3].max(0) as u64 + 5));
        for _ in usize::from(during[0] == 0)..2 {
            let after = ints(&mut con, &[limiter, &["MS"]].concat());
            assert_eq!(after[0], 0, "{limiter:?}: {after:?}");
        }
    }
    // A throttle with WARMUP starts cold again, as a new key: once its block ends, it
    // answers what a key never called answers.
    let warm = |key: &str| -> Vec<String> {
        [
            "CL.THROTTLE",
            key,
            "4",
            "10",
            "1000",
            "MS",
            "WARMUP",
            "60000",
        ]
        .iter()
        .map(|word| word.to_string())
        .collect()
    };
    let mut blocked = warm("n:warm");
    blocked.extend(["BLOCK".to_owned(), block_arg.clone()]);
    // Until refused: that refusal starts the block.
    let refused = (0..100)
        .map(|_| ints(&mut con, &blocked))
        .find(|reply| reply[0] == 1)
        .expect("a refusal");
    assert_eq!(refused[..4], [1, refused[1], 0, block], "{refused:?}");
    thread::sleep(Duration::from_millis(block as u64 + 5));
    assert_eq!(
        ints(&mut con, &warm("n:warm")),
        ints(&mut con, &warm("n:new"))
    );
}

#[test]
fn a_quantity_that_never_fits_starts_no_block() {
    let server = Server::start();
    let mut con = server.connect();
    ints(&mut con, &["RL.LOG", "k", "2", "60", "2"]);
    assert_eq!(
        ints(&mut con, &["RL.LOG", "k", "2", "60", "3", "BLOCK", "60"]),
        [1, 2, 0, -1, 60]
    );
    assert_eq!(
        ints(&mut con, &["RL.LOG", "k", "2", "60", "0"]),
        [0, 2, 0, -1, 60]
    );
}

#[test]
fn dry_runs_reply_what_the_write_would_and_write_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    // Each command: its arguments before the quantity, and after.
    let commands: [(&str, &[&str], &[&str]); 4] = [
        ("CL.THROTTLE", &["d:gcra", "2", "1", "86400"], &[]),
        ("RL.WINDOW", &["d:window", "3", "86400"], &["BUCKETS", "12"]),
        ("RL.LOG", &["d:log", "3", "86400"], &[]),
        (
            "RL.ALL",
            &[
                "2", "{d}:a", "{d}:b", "THROTTLE", "2", "1", "86400", "LOG", "3", "86400",
            ],
            &["S"],
        ),
    ];
    for (name, args, options) in commands {
        let read_only = format!("{name}_RO");
        for quantity in ["1", "2", "0", "1", "5"] {
            let mut dry = vec![read_only.as_str()];
            dry.extend_from_slice(args);
            dry.push(quantity);
            dry.extend_from_slice(options);
            let writes = changes(&mut con);
            let dry_reply = ints(&mut con, &dry);
            assert_eq!(changes(&mut con), writes, "{dry:?} wrote");
            dry[0] = name;
            let reply = ints(&mut con, &dry);
            // The same decision; the times may have moved on by a microsecond, which can
            // round a time to the next second.
            assert_eq!(dry_reply[..3], reply[..3], "{dry:?}");
            assert!(
                (dry_reply[3] - reply[3]).abs() <= 1,
                "{dry:?}: {dry_reply:?} {reply:?}"
            );
        }
    }
    // A dry run never creates a key, even for a request that would be admitted.
    let writes = changes(&mut con);
    ints(&mut con, &["RL.LOG_RO", "fresh", "3", "60"]);
    assert!(!exists(&mut con, "fresh"));
    assert_eq!(changes(&mut con), writes);
}

#[test]
fn dry_runs_answer_on_a_read_only_replica_and_for_read_only_users() {
    let master = Server::start();
    let replica = Server::start_replica(&master);
    let mut con = master.connect();
    ints(&mut con, &["RL.LOG", "r:log", "3", "86400", "2"]);
    ints(&mut con, &["CL.THROTTLE", "r:gcra", "2", "1", "86400", "3"]);
    support::wait_for_replicas(&mut con, 1);
    let mut on_replica = replica.connect();
    assert_eq!(
        ints(&mut on_replica, &["RL.LOG_RO", "r:log", "3", "86400"])[..4],
        [0, 3, 0, -1]
    );
    assert_eq!(
        ints(
            &mut on_replica,
            &["CL.THROTTLE_RO", "r:gcra", "2", "1", "86400"]
        )[..3],
        [1, 3, 0]
    );
    assert_eq!(
        ints(
            &mut on_replica,
            &[
                "RL.ALL_RO",
                "2",
                "{x}:a",
                "{x}:b",
                "LOG",
                "1",
                "60",
                "WINDOW",
                "1",
                "60",
                "FIXED"
            ]
        ),
        [0, 1, 0, -1, 60]
    );
    let refused = error(&mut on_replica, &["RL.LOG", "r:log", "3", "86400"]);
    assert!(refused.starts_with("READONLY"), "{refused}");

    // A user who may only read keys calls the dry runs, not the writing commands.
    let _: () = query(
        &mut con,
        &["ACL", "SETUSER", "reader", "on", ">pw", "%R~*", "+@all"],
    );
    let mut reader = master.connect();
    let _: () = query(&mut reader, &["AUTH", "reader", "pw"]);
    assert_eq!(
        ints(&mut reader, &["RL.LOG_RO", "r:log", "3", "86400"])[..3],
        [0, 3, 0]
    );
    assert_eq!(
        ints(
            &mut reader,
            &["RL.WINDOW_RO", "r:window", "3", "60", "FIXED"]
        )[..3],
        [0, 3, 2]
    );
    let refused = error(&mut reader, &["RL.LOG", "r:log", "3", "86400"]);
    assert!(refused.starts_with("NOPERM"), "{refused}");
}

#[test]
fn replicas_and_the_aof_hold_the_same_state_after_refunds_and_blocks() {
    let keys = [
        "o:gcra",
        "o:fixed",
        "o:sliding",
        "o:buckets",
        "o:log",
        "{o}:a",
        "{o}:b",
        "o:gone",
    ];
    assert_copies_agree(&keys, |con| {
        // Each limiter: its arguments before the quantity, and its algorithm after.
        let limiters: [(&[&str], &[&str]); 5] = [
            (&["CL.THROTTLE", "o:gcra", "2", "1", "86400"], &[]),
            (&["RL.WINDOW", "o:fixed", "3", "86400"], &["FIXED"]),
            (&["RL.WINDOW", "o:sliding", "3", "86400"], &["SLIDING"]),
            (
                &["RL.WINDOW", "o:buckets", "3", "86400"],
                &["BUCKETS", "24"],
            ),
            (&["RL.LOG", "o:log", "3", "86400"], &[]),
        ];
        for (head, algorithm) in limiters {
            let request =
                |options: &[&'static str]| [head, &options[..1], algorithm, &options[1..]].concat();
            ints(con, &request(&["2"]));
            ints(con, &request(&["1", "REFUND"]));
            ints(con, &request(&["2"]));
            // Refused: blocked for an hour.
            ints(con, &request(&["1", "BLOCK", "3600"]));
            // Given back during the block: the block stays.
            ints(con, &request(&["1", "REFUND"]));
        }
        let all = [
            "RL.ALL", "2", "{o}:a", "{o}:b", "LOG", "2", "86400", "THROTTLE", "1", "1", "86400",
        ];
        ints(con, &call(&all, &["2"]));
        ints(con, &call(&all, &["1", "BLOCK", "7200"]));
        ints(con, &call(&all, &["1", "REFUND"]));
        // A key a refund empties is deleted on the replica too.
        ints(con, &["RL.LOG", "o:gone", "3", "86400"]);
        ints(con, &["RL.LOG", "o:gone", "3", "86400", "1", "REFUND"]);
    });
}

// --- Keys written before REFUND and BLOCK existed -----------------------------------------

/// Redis' CRC-64 (Jones polynomial, reflected), which seals `DUMP` payloads.
fn crc64(bytes: &[u8]) -> u64 {
    let mut crc = 0u64;
    for &byte in bytes {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x95ac_9329_ac4b_c9b5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// An RDB length.
fn rdb_length(len: u64, out: &mut Vec<u8>) {
    match len {
        0..=63 => out.push(len as u8),
        64..=16_383 => out.extend_from_slice(&[0x40 | (len >> 8) as u8, len as u8]),
        16_384..=0xFFFF_FFFF => {
            out.push(0x80);
            out.extend_from_slice(&(len as u32).to_be_bytes());
        }
        _ => {
            out.push(0x81);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
}

/// The `DUMP` payload of a log as the first release wrote it: encoding version 1, the entry
/// count, then the entries.
fn version_1_log_dump(entries: &[u64]) -> Vec<u8> {
    const CHARSET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let module_id = b"ratelimit".iter().fold(0u64, |id, &c| {
        (id << 6) | CHARSET.iter().position(|&x| x == c).unwrap() as u64
    }) << 10
        | 1;
    let mut payload = vec![7]; // A module value, with opcodes.
    rdb_length(module_id, &mut payload);
    payload.push(2); // An unsigned: the entry count.
    rdb_length(entries.len() as u64, &mut payload);
    payload.push(5); // A string: the entries.
    rdb_length(entries.len() as u64 * 8, &mut payload);
    for entry in entries {
        payload.extend_from_slice(&entry.to_le_bytes());
    }
    payload.push(0); // The module value's end.
    payload.extend_from_slice(&9u16.to_le_bytes()); // RDB version 9: every server reads it.
    let crc = crc64(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    payload
}

#[test]
fn crc64_is_redis_own() {
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
}

#[test]
fn logs_dumped_before_blocks_existed_still_load_and_work() {
    let server = Server::start();
    let mut con = server.connect();
    let now = server_millis(&mut con) * 1_000;
    // Two entries: 2 requests a second ago, 1 just now.
    let entries = [((now - 1_000_000) as u64) << 10 | 1, (now as u64) << 10];
    let payload = version_1_log_dump(&entries);
    let _: () = redis::cmd("RESTORE")
        .arg("old")
        .arg(3_600_000)
        .arg(payload)
        .query(&mut con)
        .unwrap();
    assert_eq!(
        ints(&mut con, &["RL.LOG_RO", "old", "5", "60", "0"])[..3],
        [0, 5, 2]
    );
    assert_eq!(
        ints(&mut con, &["RL.LOG", "old", "5", "60", "2", "BLOCK", "60"])[..3],
        [0, 5, 0]
    );
    assert_eq!(
        ints(&mut con, &["RL.LOG", "old", "5", "60", "1", "BLOCK", "600"])[..4],
        [1, 5, 0, 600]
    );
    // It is saved in today's encoding, block included.
    let _: () = query(&mut con, &["DEBUG", "RELOAD"]);
    assert_eq!(
        ints(&mut con, &["RL.LOG_RO", "old", "5", "60", "0"])[..4],
        [1, 5, 0, 600]
    );
}

/// A command in the AOF's wire format.
fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[test]
fn an_aof_written_before_blocks_existed_replays_to_the_same_logs() {
    // The forms the first release wrote: a rewrite's chunk of entries, and replays of five
    // integers.
    let now = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros()) as i64;
    let entry = |time: i64, count: u64| ((time as u64) << 10 | (count - 1)).to_le_bytes();
    let chunk: Vec<u8> = [entry(now - 2_000_000, 2), entry(now - 1_000_000, 1)].concat();
    let expire = ((now + 3_600_000_000) / 1_000).to_string();
    let replay_now = (now - 500_000).to_string();
    let mut aof = resp(&[b"SELECT", b"0"]);
    aof.extend(resp(&[b"RL.LOG.LOADCHUNK", b"old", &chunk]));
    aof.extend(resp(&[b"PEXPIREAT", b"old", expire.as_bytes()]));
    aof.extend(resp(&[
        b"RL.LOG.REPLAY",
        b"old",
        b"5",
        b"3600000000",
        b"1",
        replay_now.as_bytes(),
    ]));
    let server = Server::builder()
        .arg("appendonly", "yes")
        .arg("appendfilename", "appendonly.aof")
        .file("appendonly.aof", &aof)
        .start();
    let mut con = server.connect();
    // 2 + 1 + 1 logged: one left of 5 per hour.
    assert_eq!(
        ints(&mut con, &["RL.LOG_RO", "old", "5", "3600", "0"])[..3],
        [0, 5, 1]
    );
    // The two from two seconds before `now` leave first, an hour after they were logged:
    // the wait is that hour less the time since, in whole seconds rounded up (the server,
    // slow to start under valgrind, may answer seconds after `now`).
    let wait_at = |micros: i64| (now - 2_000_000 + 3_600_000_000 - micros + 999_999) / 1_000_000;
    let before = support::server_millis(&mut con) * 1_000;
    let reply = ints(&mut con, &["RL.LOG", "old", "5", "3600", "2"]);
    let after = support::server_millis(&mut con) * 1_000 + 1_000;
    assert_eq!(reply[..3], [1, 5, 1]);
    assert!(
        (wait_at(after)..=wait_at(before)).contains(&reply[3]),
        "{reply:?}, {} to {}",
        wait_at(after),
        wait_at(before)
    );
}

#[test]
fn string_states_written_before_blocks_existed_are_read_as_they_were() {
    let server = Server::start();
    let mut con = server.connect();
    let now_ms = server_millis(&mut con);
    // A CL.THROTTLE state: the tag 0xF8, then the TAT in ticks of 2^-24 ns, 11 bytes. Here
    // two minutes ahead: two of five used, one per minute.
    let tat = (now_ms as i128 + 120_000) * 1_000_000 * (1 << 24);
    let mut gcra = vec![0xF8];
    gcra.extend_from_slice(&tat.to_le_bytes()[..11]);
    let _: () = redis::cmd("SET")
        .arg("old:gcra")
        .arg(gcra)
        .arg("PX")
        .arg(120_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(
        ints(
            &mut con,
            &["CL.THROTTLE_RO", "old:gcra", "4", "1", "60", "0"]
        )[..3],
        [0, 5, 3]
    );
    // A FIXED window counter: the tag 0xF9, the window's start and width code, one count.
    let window_start = (now_ms * 1_000) / 86_400_000_000 * 86_400_000_000;
    let mut fixed = vec![0xF9];
    fixed.extend_from_slice(&(window_start as u64).to_le_bytes()[..7]);
    fixed.push(4);
    let _: () = redis::cmd("SET")
        .arg("old:fixed")
        .arg(fixed)
        .arg("PX")
        .arg(86_400_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(
        ints(
            &mut con,
            &[
                "RL.WINDOW",
                "old:fixed",
                "5",
                "86400",
                "1",
                "FIXED",
                "BLOCK",
                "60"
            ]
        )[..3],
        [0, 5, 0]
    );
    ints(
        &mut con,
        &[
            "RL.WINDOW",
            "old:fixed",
            "5",
            "86400",
            "FIXED",
            "BLOCK",
            "60",
        ],
    );
    // Blocked: even a peek is refused.
    assert_eq!(
        ints(
            &mut con,
            &["RL.WINDOW", "old:fixed", "5", "86400", "0", "FIXED"]
        )[..3],
        [1, 5, 0]
    );
}
