//! Active defragmentation over the module's own type: where the server can defragment (a
//! build with Redis' own jemalloc, as Redis 8 and Valkey from source), it moves `RL.LOG` and
//! `RL.ACQUIRE` values through the type's callback, and every limiter answers as before; where
//! it cannot (Debian's Redis, on the system's jemalloc), it says so when asked.

mod support;

use std::time::Duration;

use redis::Connection;
use support::{ints, query, wait_until, Server};

const LOGS: usize = 2_000;

/// Every limiter's standing and digest, to compare before and after.
fn snapshot(con: &mut Connection) -> Vec<(Vec<i64>, Vec<String>)> {
    (0..LOGS)
        .map(|i| {
            let (log, lease) = (format!("log:{i}"), format!("lease:{i}"));
            let mut standing = ints(con, &["RL.LOG_RO", &log, "100", "3600", "0"]);
            standing.extend(&ints(con, &["RL.ACQUIRE_RO", &lease, "100", "3600", "0"])[..3]);
            let digest: Vec<String> = query(con, &["DEBUG", "DIGEST-VALUE", &log, &lease]);
            (standing[..3].to_vec(), digest)
        })
        .collect()
}

fn stat(con: &mut Connection, name: &str) -> i64 {
    let info: String = query(con, &["INFO", "stats"]);
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map_or(0, |value| value.trim().parse().unwrap())
}

#[test]
fn defragmentation_moves_native_values_and_every_limiter_answers_as_before() {
    let server = Server::start();
    let mut con = server.connect();
    let enabled = redis::cmd("CONFIG")
        .arg("SET")
        .arg("activedefrag")
        .arg("yes")
        .query::<()>(&mut con);
    if let Err(error) = enabled {
        // The server cannot defragment at all: nothing of the module's is ever moved.
        assert!(
            error
                .to_string()
                .contains("Active defragmentation cannot be enabled"),
            "{error}"
        );
        return;
    }
    let _: () = query(&mut con, &["CONFIG", "SET", "activedefrag", "no"]);
    // Logs and lease sets of a few entries, between strings half of which then go, so that
    // the allocator's pages are left half empty.
    let mut pipe = redis::pipe();
    for i in 0..LOGS {
        pipe.cmd("SET")
            .arg(format!("pad:{i}:a"))
            .arg("x".repeat(40))
            .ignore();
        pipe.cmd("RL.LOG")
            .arg(format!("log:{i}"))
            .arg(100)
            .arg(3600)
            .arg(1 + i % 5)
            .ignore();
        pipe.cmd("RL.ACQUIRE")
            .arg(format!("lease:{i}"))
            .arg(100)
            .arg(3600)
            .arg(1 + i % 3)
            .ignore();
        pipe.cmd("SET")
            .arg(format!("pad:{i}:b"))
            .arg("x".repeat(40))
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    let mut pipe = redis::pipe();
    for i in 0..LOGS {
        pipe.cmd("DEL").arg(format!("pad:{i}:a")).ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    let before = snapshot(&mut con);

    for (name, value) in [
        ("active-defrag-ignore-bytes", "1"),
        ("active-defrag-threshold-lower", "0"),
        ("active-defrag-cycle-min", "50"),
        ("activedefrag", "yes"),
    ] {
        let _: () = query(&mut con, &["CONFIG", "SET", name, value]);
    }
    let defragmented = wait_until(Duration::from_secs(20), || {
        stat(&mut con, "active_defrag_hits") > 0
    });
    assert!(
        defragmented,
        "no defragmentation happened\n{}",
        server.log()
    );
    let _: () = query(&mut con, &["CONFIG", "SET", "activedefrag", "no"]);
    assert_eq!(snapshot(&mut con), before);
    // And they go on: one more request each.
    assert_eq!(
        ints(&mut con, &["RL.LOG", "log:0", "100", "3600"])[..3],
        [0, 100, 98]
    );
    assert_eq!(
        ints(&mut con, &["RL.ACQUIRE", "lease:0", "100", "3600"])[..3],
        [0, 100, 98]
    );
}
