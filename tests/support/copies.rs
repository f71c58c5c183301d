//! The copies of a master's state: a replica's, and the AOF's replayed a second later and
//! after a restart. Each must hold the master's exact values and absolute expiries.

use std::thread;
use std::time::Duration;

use redis::Connection;

use super::workload::{state, State};
use super::{query, wait_for_replicas, Server};

/// Runs `calls` on a master with an AOF and a replica, then checks that the replica, a
/// replay of the AOF a second later (`DEBUG LOADAOF`) and a restart from it hold every key
/// of `keys` exactly as the master did. Returns the master's states.
pub fn assert_copies_agree(keys: &[&str], calls: impl FnOnce(&mut Connection)) -> Vec<State> {
    let mut master = Server::builder().aof().start();
    let replica = Server::start_replica(&master);
    let mut con = master.connect();
    calls(&mut con);
    wait_for_replicas(&mut con, 1);
    let states =
        |con: &mut Connection| -> Vec<State> { keys.iter().map(|key| state(con, key)).collect() };
    let on_master = states(&mut con);
    assert!(
        on_master.iter().any(Option::is_some),
        "the calls wrote nothing to compare"
    );
    assert_eq!(states(&mut replica.connect()), on_master, "the replica");
    // A replay with the clock a second on: the effects carry the master's times.
    thread::sleep(Duration::from_millis(1_100));
    let _: () = query(&mut con, &["DEBUG", "LOADAOF"]);
    assert_eq!(states(&mut con), on_master, "the AOF replayed");
    master.restart();
    assert_eq!(states(&mut master.connect()), on_master, "a restart");
    on_master
}
