//! Expiry and memory: a soak of 1,000,000 distinct limiter keys with 8-second windows
//! (longer for more keys, so that writing them takes less than a window),
//! spread over every command and algorithm. Every key written carries a TTL (`INFO keyspace`
//! keys == expires); then every key expires and `used_memory` comes back to its baseline,
//! so limiters leave nothing behind.
//!
//! `SOAK_KEYS` changes the count; `make stress` runs ten times as many.

mod support;

use std::time::Duration;

use redis::Connection;
use support::{keyspace, used_memory, wait_until, Server};

/// A request on key `i`, every command and algorithm in turn, each with a window of
/// `seconds` (longer than writing them all takes, so that they are all there at once).
fn request(i: usize, seconds: u64) -> redis::Cmd {
    let key = format!("soak:{i}");
    let (s, ms) = (seconds.to_string(), (seconds * 1_000).to_string());
    let words: &[&str] = match i % 5 {
        0 => &["CL.THROTTLE", &key, "0", "1", &s],
        1 => &["RL.WINDOW", &key, "5", &s, "1", "FIXED"],
        2 => &["RL.WINDOW", &key, "5", &s, "1", "SLIDING"],
        3 => &["RL.WINDOW", &key, "5", &ms, "1", "BUCKETS", "10", "MS"],
        _ => &["RL.LOG", &key, "5", &s],
    };
    support::command(words)
}

/// Sends requests on keys `range` in pipelines of 10,000.
fn write(con: &mut Connection, range: std::ops::Range<usize>, seconds: u64) {
    let keys: Vec<usize> = range.collect();
    for batch in keys.chunks(10_000) {
        let mut pipe = redis::pipe();
        for &i in batch {
            pipe.add_command(request(i, seconds)).ignore();
        }
        let _: () = pipe.query(con).unwrap();
    }
}

#[test]
fn a_million_short_lived_limiters_expire_and_give_their_memory_back() {
    let keys: usize = std::env::var("SOAK_KEYS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1_000_000);
    // 8 s for a million keys, 80 s for ten million.
    let seconds = (keys as u64 / 125_000).max(8);
    let server = Server::start();
    let mut con = server.connect();
    // The same pipelines once, on keys left to expire: the server's buffers for pipelines
    // this long grow once, before the baseline.
    write(&mut con, 0..20_000, 1);
    let drained = |con: &mut Connection| keyspace(con).0 == 0;
    assert!(wait_until(Duration::from_secs(30), || drained(&mut con)));
    let baseline = used_memory(&mut con);

    write(&mut con, 0..keys, seconds);
    let (written, expires) = keyspace(&mut con);
    // Some fixed windows end while the keys are written; every key there is has a TTL.
    assert!(written as usize > keys * 3 / 4, "{written} of {keys} keys");
    assert_eq!(written, expires, "keys without a TTL");
    let peak = used_memory(&mut con);

    let expired = wait_until(Duration::from_secs(2 * seconds + 60), || drained(&mut con));
    assert!(expired, "keys left: {:?}", keyspace(&mut con));
    // The keyspace's hash tables shrink in the background once the keys are gone.
    let returned = wait_until(Duration::from_secs(30), || {
        used_memory(&mut con) < baseline + 256 * 1024
    });
    let after = used_memory(&mut con);
    eprintln!("used_memory: baseline {baseline}, with {keys} keys {peak}, after expiry {after}");
    assert!(
        returned,
        "used_memory {after}, baseline {baseline}, peak {peak}"
    );
}
