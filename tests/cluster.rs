//! Redis Cluster: three masters with a replica each, made by `redis-cli --cluster create`
//! and driven by a cluster-aware client. Every command works on keys in every slot range;
//! resharding moves limiter keys with their state and expiry; a failover continues every
//! limit.

mod support;

use std::collections::HashSet;

use support::cluster::Cluster;
use support::workload::{State, Workload};
use support::{error, ints, query};

/// Limiters in the cluster: every kind and shape ten times, hashed all over the slots.
const LIMITERS: usize = 420;

/// Checks that `after` holds the same values as `before`, and expiries no earlier and at
/// most `max_later_ms` later.
fn assert_same_states(before: &[State], after: &[State], max_later_ms: i64) {
    assert_eq!(before.len(), after.len());
    for (before, after) in before.iter().zip(after) {
        match (before, after) {
            (Some((value, expire_at)), Some((moved_value, moved_expire_at))) => {
                assert_eq!(value, moved_value);
                let later = moved_expire_at - expire_at;
                assert!(
                    (0..=max_later_ms).contains(&later),
                    "expiry moved by {later} ms"
                );
            }
            _ => assert_eq!(before, after),
        }
    }
}

#[test]
fn limits_hold_across_slots_resharding_and_failover() {
    let cluster = Cluster::start(3, 1);
    let mut con = cluster.connect();
    let workload = Workload::new("user:", LIMITERS);
    workload.run(&mut con);
    let states = workload.states(&mut con);
    workload.assert_written(&states);

    // The keys are spread over every master.
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    let mut slots_used = HashSet::new();
    for master in &masters {
        let keys: i64 = query(&mut cluster.node(master.port).connect(), &["DBSIZE"]);
        assert!(keys > 50, "{keys} keys on {master:?}");
    }
    for key in workload.keys() {
        let slot: i64 = query(
            &mut cluster.nodes[0].connect(),
            &["CLUSTER", "KEYSLOT", key],
        );
        slots_used.insert(slot);
    }
    assert!(slots_used.len() > 400, "{} slots", slots_used.len());

    // A failover: the replica of the first master takes over, with the exact state (the
    // master sent it every write before handing over).
    let standings = workload.standings(&mut con);
    let replica = cluster
        .entries(masters[0].port)
        .into_iter()
        .find(|entry| entry.master_id.as_deref() == Some(masters[0].id.as_str()))
        .expect("the first master has a replica");
    cluster.failover(&replica);
    assert_eq!(workload.states(&mut con), states);
    workload.assert_continues(&mut con, &standings);

    // Resharding: every slot of one master moves to another, keys migrated with MIGRATE.
    let states = workload.states(&mut con);
    let standings = workload.standings(&mut con);
    let masters = cluster.masters();
    let (from, to) = (&masters[1], &masters[2]);
    let keys_on = |port| -> i64 { query(&mut cluster.node(port).connect(), &["DBSIZE"]) };
    let moving = keys_on(from.port);
    let staying = keys_on(to.port);
    cluster.reshard(from, to);
    assert_eq!(keys_on(to.port), moving + staying);
    // MIGRATE sends the time left, not the absolute expiry: the key may live for the
    // milliseconds the move took longer, never less.
    assert_same_states(&states, &workload.states(&mut con), 1_000);
    workload.assert_continues(&mut con, &standings);
    assert_eq!(cluster.masters().len(), 2);

    // Hash tags put several limiters of one user in one slot, so one node serves them.
    let tagged = ["{user:42}:api", "{user:42}:login", "{user:42}:log"];
    let slots: HashSet<i64> = tagged
        .iter()
        .map(|key| {
            query(
                &mut cluster.nodes[0].connect(),
                &["CLUSTER", "KEYSLOT", key],
            )
        })
        .collect();
    assert_eq!(slots.len(), 1);
    assert_eq!(
        ints(&mut con, &["CL.THROTTLE", tagged[0], "9", "10", "60"]),
        [0, 10, 9, -1, 6]
    );
    assert_eq!(
        ints(&mut con, &["RL.WINDOW", tagged[1], "5", "60"])[..3],
        [0, 5, 4]
    );
    assert_eq!(
        ints(&mut con, &["RL.LOG", tagged[2], "5", "60"]),
        [0, 5, 4, -1, 60]
    );
    // RL.ALL over them: one node, one call, all or nothing.
    assert_eq!(
        ints(
            &mut con,
            &["RL.ALL", "2", tagged[0], tagged[2], "THROTTLE", "9", "10", "60", "LOG", "5", "60"]
        ),
        [0, 5, 3, -1, 60]
    );
    // Leases on a key of any slot, released through the same routing.
    let acquired = ints(&mut con, &["RL.ACQUIRE", "pool:7", "2", "60"]);
    assert_eq!(acquired[..5], [0, 2, 1, -1, 60]);
    let released: i64 = query(
        &mut con,
        &["RL.RELEASE", "pool:7", &acquired[5].to_string()],
    );
    assert_eq!(released, 1);
    // Keys in different slots: Redis refuses the call before the module runs.
    let refused = error(
        &mut con,
        &[
            "RL.ALL", "2", "user:1", "user:2", "LOG", "5", "60", "LOG", "5", "60",
        ],
    );
    assert!(refused.starts_with("CROSSSLOT"), "{refused}");
}
