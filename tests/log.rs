//! RL.LOG against a live redis-server: exact refill, memory per logged request, the native
//! type's persistence (RDB, AOF, DUMP/RESTORE, COPY), replicas, and every refusal.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use redis::Connection;
use support::{changes, error, ints, query, server_millis, used_memory, Server};

fn log(con: &mut Connection, args: &[&str]) -> Vec<i64> {
    let mut command = vec!["RL.LOG"];
    command.extend_from_slice(args);
    ints(con, &command)
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A key's serialized value (DUMP) and absolute expiry, or `None` when it does not exist.
type State = Option<(Vec<u8>, i64)>;

fn state(con: &mut Connection, key: &str) -> State {
    let dump: Option<Vec<u8>> = query(con, &["DUMP", key]);
    let expire_at: i64 = query(con, &["PEXPIRETIME", key]);
    dump.map(|dump| (dump, expire_at))
}

/// Logs of several shapes: merged entries, quantities, a long log, a full one, a stale one.
fn workload(con: &mut Connection) -> Vec<String> {
    let mut pipe = redis::pipe();
    for i in 0..3_000 {
        pipe.add_command(support::command(&["RL.LOG", "long", "5000", "600"]))
            .ignore();
        if i % 100 == 0 {
            pipe.add_command(support::command(&[
                "RL.LOG", "weighted", "100000", "600", "777",
            ]))
            .ignore();
        }
    }
    for _ in 0..20 {
        pipe.add_command(support::command(&["RL.LOG", "full", "10", "600000", "MS"]))
            .ignore();
    }
    pipe.add_command(support::command(&["RL.LOG", "peeked", "10", "600", "0"]))
        .ignore();
    // One call of the highest limit, 1,048,576, makes 1,024 entries of 1,024.
    pipe.add_command(support::command(&[
        "RL.LOG", "split", "1048576", "600", "1048576",
    ]))
    .ignore();
    let _: () = pipe.query(con).unwrap();
    // Two calls in a transaction: propagated inside it.
    let _: () = query(con, &["MULTI"]);
    for _ in 0..2 {
        let _: () = query(con, &["RL.LOG", "in-multi", "5", "600", "2"]);
    }
    let replies: Vec<Vec<i64>> = query(con, &["EXEC"]);
    assert_eq!(replies, [[0, 5, 3, -1, 600], [0, 5, 1, -1, 600]]);
    ["long", "weighted", "full", "peeked", "split", "in-multi"]
        .map(String::from)
        .to_vec()
}

/// A server appending to a plain AOF (no RDB preamble, so rewrites use the type's
/// `aof_rewrite`), after the workload; its keys and their states.
fn aof_server_after_workload() -> (Server, Vec<String>, Vec<State>) {
    let server = Server::builder()
        .aof()
        .arg("aof-use-rdb-preamble", "no")
        .start();
    let mut con = server.connect();
    let keys = workload(&mut con);
    let before = states(&mut con, &keys);
    (server, keys, before)
}

fn states(con: &mut Connection, keys: &[String]) -> Vec<State> {
    keys.iter().map(|key| state(con, key)).collect()
}

#[test]
fn refills_exactly_as_the_oldest_requests_leave() {
    let server = Server::start();
    let mut con = server.connect();
    // t0 follows the first request, so that the oldest entry is never younger than t0
    // however slow the server (under valgrind, say).
    let mut t0 = Instant::now();
    for remaining in [4, 3, 2] {
        assert_eq!(
            log(&mut con, &["k", "5", "2000", "MS"])[..4],
            [0, 5, remaining, -1]
        );
        if remaining == 4 {
            t0 = Instant::now();
        }
    }
    thread::sleep(Duration::from_millis(1_000).saturating_sub(t0.elapsed()));
    for remaining in [1, 0] {
        assert_eq!(
            log(&mut con, &["k", "5", "2000", "MS"])[..4],
            [0, 5, remaining, -1]
        );
    }
    let refused = log(&mut con, &["k", "5", "2000", "MS"]);
    assert_eq!(refused[..3], [1, 5, 0]);
    assert!((900..=1_000).contains(&refused[3]), "{refused:?}");
    thread::sleep(Duration::from_millis(2_100).saturating_sub(t0.elapsed()));
    // The 3 from t0 have left, the 2 from t0 + 1 s have not: exactly 3 more.
    let replies: Vec<Vec<i64>> = (0..5)
        .map(|_| log(&mut con, &["k", "5", "2000", "MS"]))
        .collect();
    let admitted = replies.iter().filter(|reply| reply[0] == 0).count();
    assert_eq!(admitted, 3, "{replies:?}");
    let retry = replies[3][3];
    assert!((850..=950).contains(&retry), "{replies:?}");
}

#[test]
fn state_is_one_native_key_that_expires_with_its_newest_entry() {
    let server = Server::start();
    let mut con = server.connect();
    let before = server_millis(&mut con);
    assert_eq!(log(&mut con, &["k", "5", "60", "2"]), [0, 5, 3, -1, 60]);
    let after = server_millis(&mut con);
    let key_type: String = query(&mut con, &["TYPE", "k"]);
    assert_eq!(key_type, "ratelimit");
    let expire_at: i64 = query(&mut con, &["PEXPIRETIME", "k"]);
    assert!(
        (before + 60_000..=after + 60_001).contains(&expire_at),
        "{expire_at}"
    );
    // A refused request, a peek and an oversized one change nothing.
    log(&mut con, &["k", "5", "60", "3"]);
    let writes = changes(&mut con);
    let dump = state(&mut con, "k");
    assert_eq!(log(&mut con, &["k", "5", "60", "1"])[..3], [1, 5, 0]);
    assert_eq!(log(&mut con, &["k", "5", "60", "0"])[..4], [0, 5, 0, -1]);
    assert_eq!(log(&mut con, &["k", "5", "60", "6"])[..4], [1, 5, 0, -1]);
    assert_eq!(state(&mut con, "k"), dump);
    assert_eq!(changes(&mut con), writes);
    // Peeks and oversized requests never create a key.
    assert_eq!(log(&mut con, &["new", "5", "60", "0"]), [0, 5, 5, -1, 0]);
    assert_eq!(log(&mut con, &["new", "5", "60", "6"]), [1, 5, 5, -1, 0]);
    let exists: i64 = query(&mut con, &["EXISTS", "new"]);
    assert_eq!(exists, 0);
    // The key disappears when its newest entry leaves the window.
    log(&mut con, &["short", "5", "300", "MS"]);
    let gone = support::wait_until(Duration::from_secs(3), || {
        query::<i64, _>(&mut server.connect(), &["EXISTS", "short"]) == 0
    });
    assert!(gone);
}

#[test]
fn a_logged_request_costs_8_bytes_not_a_sorted_set_entry() {
    if support::valgrind::leaves_out_memory_measurement() {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let requests = 10_000;
    // One request per round trip: each has a microsecond of its own, so none shares an
    // entry with another (requests in the same microsecond would). The same run first, on
    // a key then deleted, grows the connection's buffers before the baseline.
    let log = |con: &mut Connection, key: &str| {
        for _ in 0..requests {
            ints(con, &["RL.LOG", key, "10000", "3600"]);
        }
    };
    log(&mut con, "warm-up");
    let _: i64 = query(&mut con, &["DEL", "warm-up"]);
    let before = used_memory(&mut con);
    log(&mut con, "hot");
    let growth = (used_memory(&mut con) - before) as f64 / requests as f64;
    // Uncompressed, the serialized log shows every entry: 8 bytes each.
    let _: () = query(&mut con, &["CONFIG", "SET", "rdbcompression", "no"]);
    let dump: Vec<u8> = query(&mut con, &["DUMP", "hot"]);
    assert!(
        dump.len() > 8 * requests,
        "only {} bytes: entries were merged",
        dump.len()
    );
    let usage: i64 = query(&mut con, &["MEMORY", "USAGE", "hot"]);
    let usage = usage as f64 / requests as f64;
    // The usual Lua log: a sorted-set member per request.
    let before = used_memory(&mut con);
    let mut pipe = redis::pipe();
    for i in 0..requests {
        let member = format!("{}-{i}", 1_700_000_000_000_000i64 + i as i64);
        pipe.cmd("ZADD").arg("zlog").arg(i).arg(member).ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    let zset = (used_memory(&mut con) - before) as f64 / requests as f64;
    eprintln!(
        "bytes per logged request: used_memory {growth}, MEMORY USAGE {usage}, sorted set {zset}"
    );
    // 10,000 entries and the log's header fill jemalloc's 80 KiB class exactly: 8.19 bytes
    // per request, and the key's own overhead.
    assert!(growth <= 8.4, "used_memory grew {growth} bytes per request");
    assert!(usage <= 8.3, "MEMORY USAGE {usage} bytes per request");
    // A sorted-set member costs about 130 bytes on Redis 7.0 and 80-91 on Redis 8.6 and
    // Valkey 8.1+: compared with the one measured here, on the same server.
    assert!(
        growth * 9.0 < zset,
        "the log took {growth} bytes per request, the sorted set {zset}"
    );
}

#[test]
fn a_log_of_one_entry_costs_what_a_sorted_set_of_one_member_costs() {
    if support::valgrind::leaves_out_memory_measurement() {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let keys = 100_000;
    let now = server_millis(&mut con) * 1_000;
    let log = |key: &str| support::command(&["RL.LOG", key, "100", "3600"]);
    // The Lua log's first request on a key: one member, and the key's expiry.
    let zset = |key: &str| {
        let mut pipe = redis::pipe();
        pipe.cmd("ZADD")
            .arg(key)
            .arg(now)
            .arg(format!("{now}-{key}"));
        pipe.cmd("PEXPIRE").arg(key).arg(3_600_000);
        pipe
    };
    let per_key = |con: &mut Connection, zset_form: bool| {
        let _: () = query(con, &["FLUSHALL", "SYNC"]);
        let before = used_memory(con);
        let mut pipe = redis::pipe();
        for i in 0..keys {
            let key = format!("{i:08}");
            if zset_form {
                for command in zset(&key).cmd_iter() {
                    pipe.add_command(command.clone()).ignore();
                }
            } else {
                pipe.add_command(log(&key)).ignore();
            }
        }
        let _: () = pipe.query(con).unwrap();
        (used_memory(con) - before) as f64 / keys as f64
    };
    // Each the least of three measurements (support::least_of_three), the first also the
    // warm-up that grows the server's buffers for pipelines this long.
    let log_key = support::least_of_three(|| per_key(&mut con, false));
    let zset_key = support::least_of_three(|| per_key(&mut con, true));
    eprintln!("bytes per key: RL.LOG of one entry {log_key}, sorted set of one member {zset_key}");
    // The same allocations: an object, the module's value wrapper and one 32-byte block,
    // against an object and a 48-byte listpack. What stays is the allocator's noise.
    assert!(
        log_key <= zset_key + 0.5,
        "RL.LOG {log_key}, sorted set {zset_key}"
    );
}

#[test]
fn rdb_save_and_load_and_dump_restore_and_copy_keep_the_log() {
    let mut server = Server::start();
    let mut con = server.connect();
    let keys = workload(&mut con);
    let before = states(&mut con, &keys);
    let exists: Vec<bool> = before.iter().map(Option::is_some).collect();
    assert_eq!(exists, [true, true, true, false, true, true]);
    let digest: Vec<String> = query(&mut con, &["DEBUG", "DIGEST-VALUE", "long"]);
    let _: () = query(&mut con, &["DEBUG", "RELOAD"]);
    assert_eq!(states(&mut con, &keys), before);
    let _: () = query(&mut con, &["SAVE"]);
    server.restart();
    let mut con = server.connect();
    assert_eq!(states(&mut con, &keys), before);
    let after: Vec<String> = query(&mut con, &["DEBUG", "DIGEST-VALUE", "long"]);
    assert_eq!(after, digest);

    let (dump, expire_at) = before[0].clone().unwrap();
    let _: () = query(
        &mut con,
        &[
            b"RESTORE".as_slice(),
            b"restored",
            expire_at.to_string().as_bytes(),
            &dump,
            b"ABSTTL",
        ],
    );
    assert_eq!(state(&mut con, "restored"), before[0]);
    let copied: i64 = query(&mut con, &["COPY", "long", "copied"]);
    assert_eq!(copied, 1);
    assert_eq!(state(&mut con, "copied"), before[0]);
    let digest_of_copy: Vec<String> = query(&mut con, &["DEBUG", "DIGEST-VALUE", "copied"]);
    assert_eq!(digest_of_copy, digest);
    // The copy is its own log.
    log(&mut con, &["copied", "5000", "600"]);
    assert_eq!(state(&mut con, "long"), before[0]);
    assert_ne!(state(&mut con, "copied"), before[0]);
}

#[test]
fn the_aof_holds_a_few_integers_per_call_and_replays_to_the_same_log() {
    let (mut server, keys, before) = aof_server_after_workload();
    let aof = server.aof();
    let calls = aof.matches("rl.log.apply").count();
    assert_eq!(calls, 3_000 + 30 + 10 + 1 + 2);
    assert!(
        !aof.contains("rl.log\r\n"),
        "the command itself is never logged"
    );
    // O(1) per call, whatever the log's length: the 3,000th call on "long" is as short as
    // the first.
    assert!(
        aof.len() / calls < 160,
        "{} bytes per call",
        aof.len() / calls
    );
    thread::sleep(Duration::from_millis(1_100));
    let mut con = server.connect();
    let _: () = query(&mut con, &["DEBUG", "LOADAOF"]);
    assert_eq!(states(&mut con, &keys), before);
    server.restart();
    assert_eq!(states(&mut server.connect(), &keys), before);
}

#[test]
fn a_rewritten_aof_rebuilds_the_log_in_chunks() {
    let (mut server, keys, before) = aof_server_after_workload();
    server.rewrite_aof();
    let aof = server.aof();
    assert!(!aof.contains("rl.log.apply"), "{aof}");
    // 3,000 entries of "long" take 3 chunks of 1,024 entries; the others one or more.
    let chunks = aof.matches("rl.log.loadchunk").count();
    assert!(chunks >= 3 + 4, "{chunks} chunks");
    server.restart();
    assert_eq!(states(&mut server.connect(), &keys), before);
}

#[test]
fn replicas_hold_the_same_log_and_expiry() {
    let master = Server::start();
    let replica = Server::start_replica(&master);
    let mut con = master.connect();
    let keys = workload(&mut con);
    support::wait_for_replicas(&mut con, 1);
    let on_master = states(&mut con, &keys);
    assert_eq!(states(&mut replica.connect(), &keys), on_master);
    let replayed = replica.info_field("commandstats", "cmdstat_rl.log.apply");
    assert!(replayed.is_some_and(|stats| stats.starts_with("calls=3043,")));
    assert!(replica
        .info_field("commandstats", "cmdstat_rl.log")
        .is_none());
}

#[test]
fn bad_arguments_and_other_types_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let usage = "ERR syntax error. Usage: RL.LOG key limit window [quantity] [S|MS|US] [BLOCK duration] [DELAY max_wait|AT_MOST|FORCE] [REFUND]";
    let arity = "ERR wrong number of arguments for 'rl.log' command";
    let i64_max = i64::MAX.to_string();
    let cases: &[(&[&str], &str)] = &[
        (&["k"], arity),
        (&["k", "5"], arity),
        (
            &["k", "five", "60"],
            "ERR limit is not an integer or out of range",
        ),
        (
            &["k", "5", "6e1"],
            "ERR window is not an integer or out of range",
        ),
        (&["k", "0", "60"], "ERR limit must be positive"),
        (
            &["k", "1048577", "60"],
            "ERR limit is too high for RL.LOG: at most 1048576 (RL.WINDOW and CL.THROTTLE take any limit)",
        ),
        (&["k", "5", "0"], "ERR window must be positive"),
        (&["k", "5", "-60"], "ERR window must be positive"),
        (
            &["k", "5", &i64_max],
            "ERR window is too long: the limit is 2^63 nanoseconds (292 years)",
        ),
        (&["k", "5", "60", "-1"], "ERR quantity must not be negative"),
        (&["k", "5", "60", "1", "2"], usage),
        (&["k", "5", "60", "FIXED"], usage),
        (&["k", "5", "60", "MS", "MS"], usage),
    ];
    let writes = changes(&mut con);
    for (args, expected) in cases {
        let mut command = vec!["RL.LOG"];
        command.extend_from_slice(args);
        assert_eq!(error(&mut con, &command), *expected, "{args:?}");
    }
    let internal = "ERR internal command: only a master or the AOF sends it";
    assert_eq!(
        error(&mut con, &["RL.LOG.REPLAY", "k", "5", "1000000", "1", "1"]),
        internal
    );
    assert_eq!(
        error(&mut con, &["RL.LOG.LOADCHUNK", "k", "12345678"]),
        internal
    );
    assert_eq!(changes(&mut con), writes);
    let exists: i64 = query(&mut con, &["EXISTS", "k"]);
    assert_eq!(exists, 0);

    for setup in [
        &["SET", "text", "hello"][..],
        &["RPUSH", "list", "a"],
        &["ZADD", "zset", "1", "m"],
        &["CL.THROTTLE", "gcra", "5", "1", "60"],
        &["RL.WINDOW", "window", "5", "60"],
        &["RL.LOG", "log", "5", "60"],
    ] {
        let _: redis::Value = query(&mut con, setup);
    }
    for key in ["text", "list", "zset", "gcra", "window"] {
        for quantity in ["1", "0", "9"] {
            assert_eq!(
                error(&mut con, &["RL.LOG", key, "5", "60", quantity]),
                WRONGTYPE,
                "{key}"
            );
        }
    }
    let dump = state(&mut con, "log");
    assert_eq!(
        error(&mut con, &["CL.THROTTLE", "log", "5", "1", "60"]),
        WRONGTYPE
    );
    assert_eq!(error(&mut con, &["RL.WINDOW", "log", "5", "60"]), WRONGTYPE);
    assert_eq!(error(&mut con, &["GET", "log"]), WRONGTYPE);
    assert_eq!(state(&mut con, "log"), dump);
}

#[test]
fn command_info_and_docs_describe_the_command() {
    let server = Server::start();
    support::assert_command_metadata(
        &mut server.connect(),
        &[
            "rl.log", "int(-4)", "write", "fast", "RW", "access", "update",
        ],
        &["RL.LOG", "user:1", "10", "60", "MS"],
        &["limit", "window", "quantity", "optional", "O(1) amortised"],
    );
}
