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
        assert!(command_calls(replica, "rl.log.replay") > 0);
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
