//! Writes skip building their effect while nothing can receive it (no AOF, no replica, no
//! replication backlog), and build it again from the first sign of a listener: these tests
//! make a listener appear after writes were made without one, and check that it misses
//! nothing, and that every write still counts as a change for `save` points.

mod support;

use support::workload::Workload;
use support::{changes, ints, query, wait_for_replicas, Server};

#[test]
fn a_replica_attaching_after_unpropagated_writes_gets_everything() {
    let master = Server::start();
    let mut con = master.connect();
    let before = Workload::new("before:", 42);
    before.run(&mut con);
    // A replica syncs now: the writes so far reach it in the snapshot, every later write
    // through the replication stream.
    let replica = Server::start_replica(&master);
    let after = Workload::new("after:", 42);
    after.run(&mut con);
    wait_for_replicas(&mut con, 1);
    for workload in [&before, &after] {
        let on_master = workload.states(&mut con);
        workload.assert_written(&on_master);
        assert_eq!(workload.states(&mut replica.connect()), on_master);
    }
    // After the replica leaves, the backlog remains for its return: still propagated.
    drop(replica);
    let later = Workload::new("later:", 42);
    later.run(&mut con);
    let replica = Server::start_replica(&master);
    wait_for_replicas(&mut con, 1);
    for workload in [&before, &after, &later] {
        assert_eq!(
            workload.states(&mut replica.connect()),
            workload.states(&mut con)
        );
    }
}

#[test]
fn a_module_loaded_into_a_server_with_replicas_propagates_from_the_start() {
    let master = Server::builder().without_module().start();
    let replica = Server::start_replica(&master);
    let mut con = master.connect();
    let path = support::module_path();
    let _: () = query(&mut con, &["MODULE", "LOAD", path.to_str().unwrap()]);
    let workload = Workload::new("limiter:", 42);
    workload.run(&mut con);
    wait_for_replicas(&mut con, 1);
    let on_master = workload.states(&mut con);
    workload.assert_written(&on_master);
    assert_eq!(workload.states(&mut replica.connect()), on_master);
}

#[test]
fn an_aof_turned_on_at_runtime_misses_nothing() {
    let mut server = Server::start();
    let mut con = server.connect();
    let before = Workload::new("before:", 42);
    before.run(&mut con);
    let _: () = query(&mut con, &["CONFIG", "SET", "appendfsync", "always"]);
    let _: () = query(&mut con, &["CONFIG", "SET", "appendonly", "yes"]);
    // Wait for the rewrite that starts the AOF, then write more.
    let started = support::wait_until(std::time::Duration::from_secs(20), || {
        server
            .info_field("persistence", "aof_rewrite_in_progress")
            .as_deref()
            == Some("0")
            && server.info_field("persistence", "aof_enabled").as_deref() == Some("1")
            && server
                .info_field("persistence", "aof_rewrite_scheduled")
                .as_deref()
                == Some("0")
    });
    assert!(started);
    let after = Workload::new("after:", 42);
    after.run(&mut con);
    let states = [before.states(&mut con), after.states(&mut con)];
    // The restart reads the AOF (the command line does not turn it on: CONFIG REWRITE is not
    // used, so point the restarted server at it explicitly).
    server.restart_with(&[("appendonly", "yes")]);
    let mut con = server.connect();
    assert_eq!([before.states(&mut con), after.states(&mut con)], states);
}

#[test]
fn every_admitted_request_counts_as_a_change_without_listeners() {
    let server = Server::start();
    let mut con = server.connect();
    let calls: [&[&str]; 3] = [
        &["CL.THROTTLE", "gcra", "5", "1", "60"],
        &["RL.WINDOW", "window", "5", "60"],
        &["RL.LOG", "log", "5", "60"],
    ];
    for call in calls {
        let before = changes(&mut con);
        assert_eq!(ints(&mut con, call)[0], 0);
        assert_eq!(changes(&mut con), before + 1, "{call:?}");
    }
}
