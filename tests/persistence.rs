//! Persistence, for every command and algorithm: the AOF (with and without its RDB
//! preamble, replayed a second later, rewritten), RDB snapshots (`BGSAVE`, `DEBUG RELOAD`)
//! and restarts from each give back the exact state and expiry, and every limit goes on
//! where it stopped. So do `DUMP`/`RESTORE`, `COPY`, `RENAME` and `MOVE`.

mod support;

use std::thread;
use std::time::Duration;

use support::workload::{Standing, State, Workload};
use support::{query, wait_until, Server};

fn workload() -> Workload {
    Workload::new("limiter:", 42)
}

/// Restarts `server` and checks that it holds the `before` states and that every limit
/// goes on from `standings`.
fn assert_a_restart_restores(
    server: &mut Server,
    workload: &Workload,
    before: &[State],
    standings: &[Standing],
) {
    server.restart();
    let mut con = server.connect();
    assert_eq!(workload.states(&mut con), before);
    workload.assert_continues(&mut con, standings);
}

/// After the workload and an AOF rewrite (with the RDB preamble or not), then more calls
/// appended: a replay a second later and a restart give the same state, and the limits
/// continue.
fn assert_aof_restores_the_state(rdb_preamble: &str) {
    let mut server = Server::builder()
        .aof()
        .arg("aof-use-rdb-preamble", rdb_preamble)
        .start();
    let workload = workload();
    workload.run(&mut server.connect());
    server.rewrite_aof();
    let mut con = server.connect();
    workload.run_transaction(&mut con, 14);
    let before = workload.states(&mut con);
    workload.assert_written(&before);
    let standings = workload.standings(&mut con);

    // The AOF holds absolute writes and replays, never the commands themselves.
    let aof = server.aof();
    for command in ["cl.throttle", "rl.window", "rl.log\r\n"] {
        assert!(!aof.contains(command), "{command} in the AOF");
    }
    thread::sleep(Duration::from_millis(1_100));
    let _: () = query(&mut con, &["DEBUG", "LOADAOF"]);
    assert_eq!(workload.states(&mut con), before);

    assert_a_restart_restores(&mut server, &workload, &before, &standings);
}

#[test]
fn an_aof_with_an_rdb_preamble_restores_the_state() {
    assert_aof_restores_the_state("yes");
}

#[test]
fn a_plain_aof_restores_the_state() {
    assert_aof_restores_the_state("no");
}

#[test]
fn rdb_snapshots_restore_the_state() {
    let mut server = Server::start();
    let mut con = server.connect();
    let workload = workload();
    workload.run(&mut con);
    let before = workload.states(&mut con);
    workload.assert_written(&before);
    let standings = workload.standings(&mut con);

    let _: () = query(&mut con, &["DEBUG", "RELOAD"]);
    assert_eq!(workload.states(&mut con), before);

    let _: String = query(&mut con, &["BGSAVE"]);
    let field = |name| server.info_field("persistence", name);
    let saved = wait_until(Duration::from_secs(20), || {
        field("rdb_bgsave_in_progress").as_deref() == Some("0")
            && field("rdb_last_bgsave_status").as_deref() == Some("ok")
            && field("rdb_changes_since_last_save").as_deref() == Some("0")
    });
    assert!(saved, "BGSAVE did not finish");
    assert_a_restart_restores(&mut server, &workload, &before, &standings);
}

#[test]
fn dump_restore_copy_rename_and_move_keep_state_and_expiry() {
    let server = Server::start();
    let mut con = server.connect();
    let workload = workload();
    workload.run(&mut con);
    let before = workload.states(&mut con);
    let standings = workload.standings(&mut con);

    let restored = workload.renamed(|key| format!("{key}:restored"));
    let copied = workload.renamed(|key| format!("{key}:copied"));
    let renamed = workload.renamed(|key| format!("{key}:renamed"));
    for (i, key) in workload.keys().enumerate() {
        let Some((dump, expire_at)) = &before[i] else {
            continue;
        };
        let _: () = query(
            &mut con,
            &[
                b"RESTORE".as_slice(),
                restored.limiters[i].key.as_bytes(),
                expire_at.to_string().as_bytes(),
                dump,
                b"ABSTTL",
            ],
        );
        let _: i64 = query(&mut con, &["COPY", key, &copied.limiters[i].key]);
    }
    assert_eq!(restored.states(&mut con), before);
    assert_eq!(copied.states(&mut con), before);
    restored.assert_continues(&mut con, &standings);
    // A copy is a limiter of its own: calls on the copy left the original alone.
    assert_eq!(workload.states(&mut con), before);
    copied.assert_continues(&mut con, &standings);

    for (i, key) in workload.keys().enumerate() {
        if before[i].is_some() {
            let _: () = query(&mut con, &["RENAME", key, &renamed.limiters[i].key]);
        }
    }
    assert_eq!(renamed.states(&mut con), before);
    assert!(workload.states(&mut con).iter().all(Option::is_none));

    for key in renamed.keys() {
        let _: i64 = query(&mut con, &["MOVE", key, "1"]);
    }
    assert!(renamed.states(&mut con).iter().all(Option::is_none));
    let _: () = query(&mut con, &["SELECT", "1"]);
    assert_eq!(renamed.states(&mut con), before);
    renamed.assert_continues(&mut con, &standings);
}
