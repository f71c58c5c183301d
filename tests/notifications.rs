//! Keyspace notifications: every write a command makes fires one event named after the
//! command, in the class of the key's type (`$` strings, `d` the module's type), as Redis'
//! own commands and other modules' do. Calls that write nothing (peeks, refusals) fire none.

mod support;

use std::time::Duration;

use redis::{Connection, PubSub};
use support::{ints, query, Server};

/// Every `(channel, payload)` published until the marker write `SET <marker> x` shows up.
fn events_until_marker(
    pubsub: &mut PubSub,
    con: &mut Connection,
    marker: &str,
) -> Vec<(String, String)> {
    let _: () = query(con, &["SET", marker, "x"]);
    let mut events = Vec::new();
    loop {
        let message = pubsub.get_message().expect("an event in time");
        let channel = message.get_channel_name().to_owned();
        let payload: String = message.get_payload().unwrap();
        if channel.ends_with(marker) || payload == marker {
            // The marker's keyspace and keyevent messages.
            if channel.starts_with("__keyevent") {
                return events;
            }
            continue;
        }
        events.push((channel, payload));
    }
}

/// Subscribes `subscriber` to every keyspace and keyevent channel of db 0.
fn subscribe(subscriber: &mut Connection) -> PubSub<'_> {
    let mut pubsub = subscriber.as_pubsub();
    pubsub.psubscribe("__key*@0__:*").expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    pubsub
}

/// The two messages one event publishes: on the key's channel and on the event's.
fn event(key: &str, name: &str) -> [(String, String); 2] {
    [
        (format!("__keyspace@0__:{key}"), name.to_owned()),
        (format!("__keyevent@0__:{name}"), key.to_owned()),
    ]
}

#[test]
fn each_write_fires_its_commands_event_and_nothing_else_does() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "notify-keyspace-events", "KEA"],
    );
    let mut subscriber = server.connect();
    let mut subscriber = subscribe(&mut subscriber);

    // Admitted: a write each. Peeks, refusals and oversized requests: none.
    ints(&mut con, &["CL.THROTTLE", "t", "0", "1", "60"]);
    ints(&mut con, &["CL.THROTTLE", "t", "0", "1", "60"]);
    ints(&mut con, &["CL.THROTTLE", "t", "0", "1", "60", "0"]);
    ints(&mut con, &["RL.WINDOW", "w", "1", "60", "FIXED"]);
    ints(&mut con, &["RL.WINDOW", "w", "1", "60", "5", "FIXED"]);
    ints(&mut con, &["RL.LOG", "l", "2", "60"]);
    ints(&mut con, &["RL.LOG", "l", "2", "60", "0"]);
    ints(&mut con, &["RL.LOG", "l", "2", "60"]);
    ints(&mut con, &["RL.LOG", "l", "2", "60"]);

    let expected: Vec<(String, String)> = [
        event("t", "cl.throttle"),
        event("w", "rl.window"),
        event("l", "rl.log"),
        event("l", "rl.log"),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(
        events_until_marker(&mut subscriber, &mut con, "m1"),
        expected
    );

    // Only the classes asked for: strings (`$`) without the module's type (`d`), and back.
    let _: () = query(&mut con, &["CONFIG", "SET", "notify-keyspace-events", "E$"]);
    ints(&mut con, &["CL.THROTTLE", "t2", "0", "1", "60"]);
    ints(&mut con, &["RL.LOG", "l2", "2", "60"]);
    let _: () = query(&mut con, &["CONFIG", "SET", "notify-keyspace-events", "Ed"]);
    ints(&mut con, &["RL.WINDOW", "w2", "1", "60"]);
    ints(&mut con, &["RL.LOG", "l3", "2", "60"]);
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "notify-keyspace-events", "KEA"],
    );
    let expected = vec![
        ("__keyevent@0__:cl.throttle".to_owned(), "t2".to_owned()),
        ("__keyevent@0__:rl.log".to_owned(), "l3".to_owned()),
    ];
    assert_eq!(
        events_until_marker(&mut subscriber, &mut con, "m2"),
        expected
    );
}

#[test]
fn refunds_blocks_and_rl_all_fire_their_events_and_dry_runs_none() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "notify-keyspace-events", "KEA"],
    );
    let mut subscriber = server.connect();
    let mut subscriber = subscribe(&mut subscriber);
    // A refund that leaves something, one that empties the key (deleted), a block.
    ints(&mut con, &["CL.THROTTLE", "t", "4", "1", "60", "3"]);
    ints(
        &mut con,
        &["CL.THROTTLE", "t", "4", "1", "60", "1", "REFUND"],
    );
    ints(
        &mut con,
        &["CL.THROTTLE", "t", "4", "1", "60", "9", "REFUND"],
    );
    ints(&mut con, &["RL.LOG", "l", "1", "60"]);
    ints(&mut con, &["RL.LOG", "l", "1", "60", "BLOCK", "60"]);
    // Dry runs write nothing, so they fire nothing.
    ints(&mut con, &["RL.LOG_RO", "l", "1", "60"]);
    ints(&mut con, &["CL.THROTTLE_RO", "t", "4", "1", "60"]);
    // RL.ALL fires its own event on each key it writes.
    ints(
        &mut con,
        &[
            "RL.ALL", "2", "a", "b", "THROTTLE", "1", "1", "60", "LOG", "2", "60",
        ],
    );
    let expected: Vec<(String, String)> = [
        event("t", "cl.throttle"),
        event("t", "cl.throttle"),
        event("t", "cl.throttle"),
        event("l", "rl.log"),
        event("l", "rl.log"),
        event("a", "rl.all"),
        event("b", "rl.all"),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(
        events_until_marker(&mut subscriber, &mut con, "m"),
        expected
    );
}

#[test]
fn with_notifications_off_nothing_is_published() {
    let server = Server::start();
    let mut con = server.connect();
    let mut subscriber = server.connect();
    let mut subscriber = subscribe(&mut subscriber);
    ints(&mut con, &["CL.THROTTLE", "t", "0", "1", "60"]);
    ints(&mut con, &["RL.LOG", "l", "2", "60"]);
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "notify-keyspace-events", "KEA"],
    );
    assert_eq!(
        events_until_marker(&mut subscriber, &mut con, "marker"),
        vec![]
    );
}

#[test]
fn leases_fire_their_commands_events_and_peeks_none() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "notify-keyspace-events", "KEA"],
    );
    let mut subscriber = server.connect();
    let mut subscriber = subscribe(&mut subscriber);
    let id = ints(&mut con, &["RL.ACQUIRE", "jobs", "2", "60"])[5].to_string();
    ints(&mut con, &["RL.ACQUIRE", "jobs", "2", "60", "0"]);
    ints(&mut con, &["RL.ACQUIRE_RO", "jobs", "2", "60"]);
    let renewed: i64 = query(&mut con, &["RL.RENEW", "jobs", &id, "90"]);
    let unknown: i64 = query(&mut con, &["RL.RELEASE", "jobs", "42"]);
    // The last lease released: the key goes, under the release's event.
    let released: i64 = query(&mut con, &["RL.RELEASE", "jobs", &id]);
    assert_eq!((renewed, unknown, released), (1, 0, 1));
    let expected: Vec<(String, String)> = [
        event("jobs", "rl.acquire"),
        event("jobs", "rl.renew"),
        event("jobs", "rl.release"),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(
        events_until_marker(&mut subscriber, &mut con, "m"),
        expected
    );
}
