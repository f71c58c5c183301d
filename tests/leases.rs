//! RL.ACQUIRE, RL.RELEASE and RL.RENEW on live servers: concurrency limits whose slots come
//! back on their own when a lease ends; replies, racing workers, replicas, the AOF, copies,
//! memory, and errors that change nothing.

mod support;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use redis::Connection;
use support::copies::assert_copies_agree;
use support::workload::state;
use support::{
    assert_expires_after, changes, error, ints, least_of_three, query, used_memory, Server,
};

/// `RL.ACQUIRE` and its reply: the five integers and the id.
fn acquire(con: &mut Connection, args: &[&str]) -> ([i64; 5], i64) {
    let mut call = vec!["RL.ACQUIRE"];
    call.extend_from_slice(args);
    let reply = ints(con, &call);
    assert_eq!(reply.len(), 6, "{reply:?}");
    (reply[..5].try_into().unwrap(), reply[5])
}

fn integer(con: &mut Connection, args: &[&str]) -> i64 {
    query(con, args)
}

#[test]
fn slots_are_held_until_released_and_refusals_say_when_they_free() {
    let server = Server::start();
    let mut con = server.connect();
    let (reply, first) = acquire(&mut con, &["pool", "2", "30"]);
    assert_eq!(reply, [0, 2, 1, -1, 30]);
    let (reply, second) = acquire(&mut con, &["pool", "2", "30"]);
    assert_eq!(reply, [0, 2, 0, -1, 30]);
    assert!(
        first > 0 && second > 0 && second != first,
        "{first} {second}"
    );
    // Full: at most 30 s until the first lease ends (a release may come sooner).
    assert_eq!(
        acquire(&mut con, &["pool", "2", "30"]),
        ([1, 2, 0, 30, 30], 0)
    );
    // Never fits, a peek, a dry run: id 0, nothing written.
    let writes = changes(&mut con);
    assert_eq!(
        acquire(&mut con, &["pool", "2", "30", "3"]),
        ([1, 2, 0, -1, 30], 0)
    );
    assert_eq!(
        acquire(&mut con, &["pool", "2", "30", "0"]),
        ([0, 2, 0, -1, 30], 0)
    );
    let reply = ints(&mut con, &["RL.ACQUIRE_RO", "pool", "2", "30"]);
    assert_eq!(reply, [1, 2, 0, 30, 30, 0]);
    assert_eq!(changes(&mut con), writes);
    // Released: a slot comes back at once; a second release finds nothing.
    assert_eq!(
        integer(&mut con, &["RL.RELEASE", "pool", &first.to_string()]),
        1
    );
    assert_eq!(
        integer(&mut con, &["RL.RELEASE", "pool", &first.to_string()]),
        0
    );
    assert_eq!(integer(&mut con, &["RL.RELEASE", "nothing", "1"]), 0);
    assert!(!query::<bool, _>(&mut con, &["EXISTS", "nothing"]));
    let (reply, third) = acquire(&mut con, &["pool", "2", "30"]);
    assert_eq!(reply, [0, 2, 0, -1, 30]);
    // Ids are drawn at random: never one given before.
    assert!(third != first && third != second);
    // Once every lease is released the key goes.
    for id in [second, third] {
        assert_eq!(
            integer(&mut con, &["RL.RELEASE", "pool", &id.to_string()]),
            1
        );
    }
    assert!(!query::<bool, _>(&mut con, &["EXISTS", "pool"]));
    let kind: String = {
        acquire(&mut con, &["pool", "2", "30", "2"]);
        query(&mut con, &["TYPE", "pool"])
    };
    assert_eq!(kind, "ratelimit");
}

#[test]
fn a_worker_that_never_releases_gives_its_slot_back_when_the_lease_ends() {
    let server = Server::start();
    let mut con = server.connect();
    let (_, id) = assert_expires_after(&mut con, "w", 200, |con| {
        acquire(con, &["w", "1", "200", "MS"])
    });
    assert_eq!(
        acquire(&mut con, &["w", "1", "200", "MS"]).0[..3],
        [1, 1, 0]
    );
    thread::sleep(Duration::from_millis(250));
    // The key is gone with its lease; the dead worker's release and renew find nothing.
    assert!(!query::<bool, _>(&mut con, &["EXISTS", "w"]));
    assert_eq!(
        integer(&mut con, &["RL.RENEW", "w", &id.to_string(), "1"]),
        0
    );
    assert_eq!(integer(&mut con, &["RL.RELEASE", "w", &id.to_string()]), 0);
    let (reply, next) = acquire(&mut con, &["w", "1", "200", "MS"]);
    assert_eq!(reply[..3], [0, 1, 0]);
    assert!(
        next > 0 && next != id,
        "ids of a key are never given twice: {id} then {next}"
    );
}

#[test]
fn a_renewed_lease_holds_on() {
    let server = Server::start();
    let mut con = server.connect();
    let (_, id) = acquire(&mut con, &["r", "1", "300", "MS"]);
    thread::sleep(Duration::from_millis(200));
    let renewed = assert_expires_after(&mut con, "r", 300, |con| {
        integer(con, &["RL.RENEW", "r", &id.to_string(), "300", "MS"])
    });
    assert_eq!(renewed, 1);
    thread::sleep(Duration::from_millis(200));
    // 400 ms after it was taken, the renewed lease still holds the slot.
    assert_eq!(
        acquire(&mut con, &["r", "1", "300", "MS"]).0[..3],
        [1, 1, 0]
    );
    let renewed = assert_expires_after(&mut con, "r", 1_000, |con| {
        integer(con, &["RL.RENEW", "r", &id.to_string(), "1", "S"])
    });
    assert_eq!(renewed, 1);
}

#[test]
fn racing_workers_hold_exactly_the_limit() {
    let server = Server::start();
    let workers = 10;
    let start = Arc::new(Barrier::new(workers));
    let racers: Vec<_> = (0..workers)
        .map(|_| {
            let start = Arc::clone(&start);
            let mut con = server.connect();
            thread::spawn(move || {
                start.wait();
                (0..20)
                    .map(|_| acquire(&mut con, &["race", "37", "3600"]))
                    .filter(|(reply, _)| reply[0] == 0)
                    .map(|(_, id)| id)
                    .collect::<Vec<i64>>()
            })
        })
        .collect();
    let mut ids: Vec<i64> = racers
        .into_iter()
        .flat_map(|racer| racer.join().unwrap())
        .collect();
    assert_eq!(ids.len(), 37);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 37, "every id once");
}

#[test]
fn replicas_the_aof_and_copies_hold_the_same_leases() {
    let keys = ["l:a", "l:b", "l:gone"];
    assert_copies_agree(&keys, |con| {
        let mut ids = Vec::new();
        for quantity in ["1", "2", "1", "9"] {
            ids.push(acquire(con, &["l:a", "5", "3600", quantity]).1);
        }
        assert_eq!(integer(con, &["RL.RELEASE", "l:a", &ids[1].to_string()]), 1);
        assert_eq!(
            integer(con, &["RL.RENEW", "l:a", &ids[0].to_string(), "7200"]),
            1
        );
        acquire(con, &["l:b", "3", "100000", "2", "MS"]);
        let (_, gone) = acquire(con, &["l:gone", "3", "3600"]);
        integer(con, &["RL.RELEASE", "l:gone", &gone.to_string()]);
    });
    // DUMP/RESTORE and COPY keep the leases and the ids to come.
    let server = Server::start();
    let mut con = server.connect();
    let (_, id) = acquire(&mut con, &["src", "3", "3600"]);
    let dump: Vec<u8> = query(&mut con, &["DUMP", "src"]);
    let _: () = redis::cmd("RESTORE")
        .arg("restored")
        .arg(0)
        .arg(dump)
        .query(&mut con)
        .unwrap();
    let _: bool = query(&mut con, &["COPY", "src", "copied"]);
    for key in ["restored", "copied"] {
        let (reply, next) = acquire(&mut con, &[key, "3", "3600"]);
        assert_eq!(reply[..3], [0, 3, 1], "{key}");
        assert!(next > 0 && next != id, "{key}");
        assert_eq!(
            integer(&mut con, &["RL.RELEASE", key, &id.to_string()]),
            1,
            "{key}"
        );
    }
    // The original is untouched by what was done to its copies.
    assert_eq!(
        ints(&mut con, &["RL.ACQUIRE_RO", "src", "3", "3600", "0"])[2],
        2
    );
    let _: () = query(&mut con, &["DEBUG", "RELOAD"]);
    assert_eq!(
        ints(&mut con, &["RL.ACQUIRE_RO", "src", "3", "3600", "0"])[2],
        2
    );
}

#[test]
fn a_lease_costs_16_bytes_and_a_one_lease_key_what_a_one_entry_log_does() {
    if support::valgrind::leaves_out_memory_measurement() {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let leases = 10_000;
    let run = |con: &mut Connection, key: &str| {
        let mut pipe = redis::pipe();
        for _ in 0..leases {
            pipe.cmd("RL.ACQUIRE")
                .arg(key)
                .arg(65_536)
                .arg(3_600)
                .ignore();
        }
        let _: () = pipe.query(con).unwrap();
    };
    // Each cost here is the least of three measurements, the first also the warm-up.
    let per_lease = least_of_three(|| {
        let _: i64 = query(&mut con, &["DEL", "held"]);
        let before = used_memory(&mut con);
        run(&mut con, "held");
        (used_memory(&mut con) - before) as f64 / leases as f64
    });
    assert_eq!(
        ints(&mut con, &["RL.ACQUIRE_RO", "held", "65536", "3600", "0"])[2],
        55_536
    );
    eprintln!("bytes per held lease: {per_lease}");
    assert!(per_lease <= 24.0, "{per_lease} bytes per lease");

    let keys = 20_000;
    let per_key = |con: &mut Connection, command: &str| {
        let _: () = query(con, &["FLUSHALL", "SYNC"]);
        let before = used_memory(con);
        // In pipelines of a thousand: the server's query buffer then stays small, and the
        // two commands' names, of different lengths, do not weigh on what is measured.
        for batch in (0..keys).collect::<Vec<_>>().chunks(1_000) {
            let mut pipe = redis::pipe();
            for i in batch {
                pipe.cmd(command)
                    .arg(format!("{i:08}"))
                    .arg(100)
                    .arg(3_600)
                    .ignore();
            }
            let _: () = pipe.query(con).unwrap();
        }
        // Past 16,384 keys the keyspace's tables are still being rehashed, the old ones
        // (128 KB) held until the server's cron finishes them: `used_memory` waits until
        // two readings a cron tick apart agree.
        (used_memory(con) - before) as f64 / keys as f64
    };
    let log = least_of_three(|| per_key(&mut con, "RL.LOG"));
    let lease = least_of_three(|| per_key(&mut con, "RL.ACQUIRE"));
    eprintln!("bytes per key: one lease {lease}, a log of one entry {log}");
    assert!(lease <= log + 0.5, "one lease {lease}, one log entry {log}");
}

#[test]
fn every_error_is_named_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let (_, id) = acquire(&mut con, &["held", "2", "3600"]);
    ints(&mut con, &["RL.LOG", "log", "5", "60"]);
    let _: () = query(&mut con, &["SET", "text", "hello"]);
    let keys = ["held", "log", "text"];
    let before: Vec<_> = keys.iter().map(|key| state(&mut con, key)).collect();
    let writes = changes(&mut con);
    let cases: &[(&[&str], &str)] = &[
        (
            &["RL.ACQUIRE", "held", "0", "60"],
            "ERR limit must be positive",
        ),
        (
            &["RL.ACQUIRE", "held", "-2", "60"],
            "ERR limit must be positive",
        ),
        (
            &["RL.ACQUIRE", "held", "65537", "60"],
            "ERR limit is too high for RL.ACQUIRE: at most 65536",
        ),
        (
            &["RL.ACQUIRE", "held", "2", "0"],
            "ERR lease must be positive",
        ),
        (
            &["RL.ACQUIRE", "held", "2", "x"],
            "ERR lease is not an integer or out of range",
        ),
        (
            &["RL.ACQUIRE", "held", "2", "60", "-1"],
            "ERR quantity must not be negative",
        ),
        (
            &["RL.ACQUIRE", "held", "2", "60", "1", "REFUND"],
            "ERR syntax error. Usage: RL.ACQUIRE key limit lease [quantity] [S|MS|US]",
        ),
        (
            &["RL.ACQUIRE", "held", "2", "60", "MS", "MS"],
            "ERR syntax error. Usage: RL.ACQUIRE key limit lease [quantity] [S|MS|US]",
        ),
        (
            &["RL.RELEASE", "held", "1.5"],
            "ERR id is not an integer or out of range",
        ),
        (&["RL.RELEASE", "held", "0"], "ERR id must be positive"),
        (
            &["RL.RENEW", "held", "x", "60"],
            "ERR id is not an integer or out of range",
        ),
        (
            &["RL.RENEW", "held", "1", "-60"],
            "ERR lease must be positive",
        ),
        (
            &["RL.RENEW", "held", "1", "60", "MINUTES"],
            "ERR syntax error. Usage: RL.RENEW key id lease [S|MS|US]",
        ),
        (
            &["RL.RELEASE", "held"],
            "ERR wrong number of arguments for 'rl.release' command",
        ),
        (
            &["RL.RENEW", "held", "1"],
            "ERR wrong number of arguments for 'rl.renew' command",
        ),
        (
            &["RL.ACQUIRE", "held", "2"],
            "ERR wrong number of arguments for 'rl.acquire' command",
        ),
        (
            &["RL.ACQUIRE", "log", "2", "60"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["RL.ACQUIRE", "text", "2", "60"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["RL.RELEASE", "log", "1"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["RL.RENEW", "text", "1", "60"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["RL.LOG", "held", "5", "60"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["RL.LEASE.APPLY", "held", "RELEASE", "1", &id.to_string()],
            "ERR internal command: only a master or the AOF sends it",
        ),
    ];
    for (call, expected) in cases {
        assert_eq!(error(&mut con, call), *expected, "{call:?}");
    }
    let after: Vec<_> = keys.iter().map(|key| state(&mut con, key)).collect();
    assert_eq!(after, before);
    assert_eq!(changes(&mut con), writes);
}

/// Lease ids are drawn at random by the master: a key deleted and made again in the same
/// instant (one `MULTI`, one cached time), or by a clock that stepped back, gives no id
/// twice, and one holder's id says nothing of the next (they are no sequence, no time).
#[test]
fn ids_are_never_given_twice_and_cannot_be_guessed() {
    let server = Server::start();
    let mut con = server.connect();
    let mut ids = Vec::new();
    for _ in 0..200 {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("RL.ACQUIRE")
            .arg("g")
            .arg(5)
            .arg(60)
            .cmd("DEL")
            .arg("g")
            .cmd("RL.ACQUIRE")
            .arg("g")
            .arg(5)
            .arg(60)
            .cmd("DEL")
            .arg("g");
        let (first, _, second, _): (Vec<i64>, i64, Vec<i64>, i64) = pipe.query(&mut con).unwrap();
        ids.extend([first[5], second[5]]);
    }
    assert!(ids.iter().all(|&id| id > 0 && id < 1 << 54), "{ids:?}");
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "an id given twice");
    // Not a sequence: consecutive ids a key gives are not a step apart, nor ordered.
    let steps = ids
        .windows(2)
        .filter(|pair| (pair[1] - pair[0]).abs() < 1_000_000)
        .count();
    assert!(
        steps < 4,
        "{steps} of {} consecutive ids close together",
        ids.len()
    );
    let rising = ids.windows(2).filter(|pair| pair[1] > pair[0]).count();
    assert!(
        (100..300).contains(&rising),
        "{rising} of {} rising",
        ids.len() - 1
    );
}
