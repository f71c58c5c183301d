//! An unplanned failover with `WAIT`: a master with one replica a millisecond away (a link
//! that drops what it holds when the master dies, as when its machine fails), a client that
//! admits requests and calls `WAIT 1 100` after each, the master killed with SIGKILL at a
//! random moment, the replica promoted. Every admission `WAIT` acknowledged is on the new
//! master, and nothing the client was not told about is. `bench/failover.py` measures what
//! is lost without `WAIT` (docs/guarantees.md).

mod support;

use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::link::DelayedLink;
use support::{ints, query, Server};

/// A request of `quantity` (its read-only variant when `read_only`) to a limiter that
/// admits every request of a run: `limit - remaining` is what it records.
fn call(quantity: &str, read_only: bool) -> Vec<&str> {
    let command = if read_only {
        "RL.WINDOW_RO"
    } else {
        "RL.WINDOW"
    };
    // A fixed window of 10^9 s: the next boundary is in 2033.
    vec![
        command,
        "failover",
        "1000000000",
        "1000000000",
        quantity,
        "FIXED",
    ]
}

/// Milliseconds from 200 to 599, varying from run to run.
fn jitter_ms() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    200 + u64::from(nanos) % 400
}

#[test]
fn nothing_wait_acknowledged_is_lost_when_the_master_dies() {
    for run in 0..4 {
        let mut master = Server::start();
        let link = DelayedLink::start(master.port(), Duration::from_millis(1));
        let replica = Server::builder()
            .arg("replicaof", &format!("127.0.0.1 {}", link.port()))
            .start();
        replica.wait_for_replication_link();
        let mut con = master.connect();
        // A replica gets the stream once it has acknowledged its sync: start from there.
        let _: () = query(&mut con, &["SET", "warm-up", "1"]);
        support::wait_for_replicas(&mut con, 1);
        let client = thread::spawn(move || {
            let (mut seen, mut acknowledged) = (0, 0);
            loop {
                let Ok(reply) = support::command(&call("1", false)).query::<Vec<i64>>(&mut con)
                else {
                    break;
                };
                assert_eq!(reply[0], 0, "{reply:?}");
                seen += 1;
                match redis::cmd("WAIT").arg(1).arg(100).query::<i64>(&mut con) {
                    Ok(replicas) if replicas >= 1 => acknowledged = seen,
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            (seen, acknowledged)
        });
        thread::sleep(Duration::from_millis(jitter_ms()));
        master.kill();
        let (seen, acknowledged) = client.join().unwrap();
        // What reached the replica is applied before it is promoted: it has seen the link
        // go down (it applies what it reads as it reads it).
        let mut promoted = replica.connect();
        let down = support::wait_until(Duration::from_secs(30), || {
            let info: String = query(&mut promoted, &["INFO", "replication"]);
            info.contains("master_link_status:down")
        });
        assert!(down, "run {run}: the replica never saw its master go");
        let _: () = query(&mut promoted, &["REPLICAOF", "NO", "ONE"]);
        let recorded = 1_000_000_000 - ints(&mut promoted, &call("0", true))[2];
        assert!(acknowledged > 0, "run {run}: nothing was acknowledged");
        // The request in flight when the master died may have been applied unseen.
        assert!(
            acknowledged <= recorded && recorded <= seen + 1,
            "run {run}: the client saw {seen} admissions, WAIT acknowledged {acknowledged}, \
             the new master records {recorded}"
        );
    }
}
