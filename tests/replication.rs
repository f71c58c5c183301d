//! Deterministic replication: replicas hold the master's exact values and absolute expiries,
//! because the module propagates what it wrote (`SET key value PXAT expiry`, or for a log
//! `RL.LOG.REPLAY` with the master's clock reading), never a command for a replica to run
//! again with its own clock; and a promoted replica goes on where the master stopped.

mod support;

use support::workload::Workload;
use support::{query, Server};

fn command_calls(server: &Server, command: &str) -> i64 {
    server
        .info_field("commandstats", &format!("cmdstat_{command}"))
        .and_then(|stats| {
            stats
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[test]
fn two_replicas_hold_the_masters_state_and_a_promoted_one_continues_every_limit() {
    let master = Server::start();
    let replicas = [
        Server::start_replica(&master),
        Server::start_replica(&master),
    ];
    let mut con = master.connect();
    let workload = Workload::new("limiter:", 84);
    workload.run(&mut con);
    workload.run_transaction(&mut con, 14);
    support::wait_for_replicas(&mut con, 2);
    let on_master = workload.states(&mut con);
    workload.assert_written(&on_master);
    for replica in &replicas {
        assert_eq!(workload.states(&mut replica.connect()), on_master);
        // What reached the replicas were writes and replays, not the commands themselves.
        assert!(command_calls(replica, "set") > 0);
        assert!(command_calls(replica, "rl.log.apply") > 0);
        for command in ["cl.throttle", "rl.window", "rl.log"] {
            assert_eq!(command_calls(replica, command), 0, "{command}");
        }
    }

    let standings = workload.standings(&mut con);
    drop(master);
    let promoted = &replicas[0];
    let _: () = query(&mut promoted.connect(), &["REPLICAOF", "NO", "ONE"]);
    let mut con = promoted.connect();
    assert_eq!(workload.states(&mut con), on_master);
    workload.assert_continues(&mut con, &standings);
}

#[test]
fn a_replica_without_the_module_holds_the_same_string_limiters() {
    let master = Server::start();
    let bare_replica = Server::builder()
        .without_module()
        .replica_of(&master)
        .start();
    bare_replica.wait_for_replication_link();
    let mut con = master.connect();
    let workload = Workload::new("limiter:", 84).without_log();
    workload.run(&mut con);
    support::wait_for_replicas(&mut con, 1);
    let on_master = workload.states(&mut con);
    workload.assert_written(&on_master);
    assert_eq!(workload.states(&mut bare_replica.connect()), on_master);
}

/// Diskless loading: the data type checks read errors and is safe to load asynchronously,
/// so a replica with `repl-diskless-load swapdb` loads a full resync from the socket while it
/// keeps serving the old dataset, and ends with the master's exact state.
#[test]
fn a_replica_loads_a_full_resync_from_the_socket_asynchronously() {
    let master = Server::builder().arg("repl-backlog-size", "16384").start();
    // Events are served every KB of loading, so INFO can see it.
    let replica = Server::builder()
        .replica_of(&master)
        .arg("repl-diskless-load", "swapdb")
        .arg("loading-process-events-interval-bytes", "1024")
        .start();
    replica.wait_for_replication_link();
    let mut con = master.connect();
    let workload = Workload::new("limiter:", 84);
    workload.run(&mut con);
    support::wait_for_replicas(&mut con, 1);
    // Keys a slowed-down load takes a while over.
    let _: () = query(&mut con, &["DEBUG", "POPULATE", "2000", "pad", "10"]);
    assert!(
        replica.log().contains("receiving streamed RDB from"),
        "the first sync did not load from the socket:\n{}",
        replica.log()
    );

    // The replica falls behind by more than the backlog while it sleeps, so that it comes
    // back to a full resync from the same master (the case Redis loads asynchronously).
    let sleeper = {
        let mut replica_con = replica.connect();
        std::thread::spawn(move || {
            let _: () = query(&mut replica_con, &["DEBUG", "SLEEP", "1"]);
        })
    };
    // Asleep once it no longer answers a PING (on a bare socket: a client's handshake would
    // wait for the sleep's end).
    let asleep = support::wait_until(std::time::Duration::from_secs(5), || {
        use std::io::{Read, Write};
        let mut probe = std::net::TcpStream::connect(("127.0.0.1", replica.port())).unwrap();
        probe
            .set_read_timeout(Some(std::time::Duration::from_millis(100)))
            .unwrap();
        probe.write_all(b"PING\r\n").unwrap();
        probe.read(&mut [0; 16]).is_err()
    });
    assert!(asleep, "the replica never went to sleep");
    let _: i64 = query(&mut con, &["CLIENT", "KILL", "TYPE", "replica"]);
    let padding = "x".repeat(30_000);
    for i in 0..10 {
        let _: () = query(&mut con, &["SET", &format!("big{i}"), &padding]);
    }
    let mut replica_con = replica.connect();
    let _: () = query(
        &mut replica_con,
        &["CONFIG", "SET", "key-load-delay", "200"],
    );
    sleeper.join().unwrap();
    let loaded_asynchronously = support::wait_until(std::time::Duration::from_secs(10), || {
        replica
            .info_field("persistence", "async_loading")
            .as_deref()
            == Some("1")
    });
    assert!(
        loaded_asynchronously,
        "no asynchronous load:\n{}",
        replica.log()
    );
    // Meanwhile the old dataset still answers.
    assert!(workload
        .states(&mut replica_con)
        .iter()
        .any(Option::is_some));
    let _: () = query(&mut replica_con, &["CONFIG", "SET", "key-load-delay", "0"]);
    replica.wait_for_replication_link();
    support::wait_for_replicas(&mut con, 1);
    assert_eq!(
        workload.states(&mut replica.connect()),
        workload.states(&mut con)
    );
    let keys: i64 = query(&mut replica.connect(), &["DBSIZE"]);
    let on_master: i64 = query(&mut con, &["DBSIZE"]);
    assert_eq!(keys, on_master);
}
