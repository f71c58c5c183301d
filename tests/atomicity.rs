//! Atomicity: many connections racing on one key admit exactly the limit, for every command
//! and algorithm. Each call reads, decides and writes inside Redis in one step, so no two
//! clients can both take the last unit.

mod support;

use std::sync::{Arc, Barrier};
use std::thread;

use support::{ints, Server};

const CONNECTIONS: usize = 12;
const REQUESTS_PER_CONNECTION: usize = 50;
const LIMIT: usize = 250;

fn owned(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| word.to_string()).collect()
}

/// A request of `quantity` to `limiter`.
fn request((head, tail): &(Vec<String>, Vec<String>), quantity: u64) -> Vec<String> {
    let mut command = head.clone();
    command.push(quantity.to_string());
    command.extend_from_slice(tail);
    command
}

#[test]
fn racing_connections_admit_exactly_the_limit() {
    let server = Server::start();
    let limit = LIMIT.to_string();
    let burst = (LIMIT - 1).to_string();
    // Each limiter as the words before the quantity and the words after it.
    let limiters: Vec<(Vec<String>, Vec<String>)> = [
        (
            vec!["CL.THROTTLE", "race:gcra", &burst, "1", "3600"],
            vec![],
        ),
        (
            vec!["RL.WINDOW", "race:fixed", &limit, "1000000"],
            vec!["FIXED"],
        ),
        (
            vec!["RL.WINDOW", "race:sliding", &limit, "1000000"],
            vec!["SLIDING"],
        ),
        (
            vec!["RL.WINDOW", "race:buckets", &limit, "1000000"],
            vec!["BUCKETS", "60"],
        ),
        (vec!["RL.LOG", "race:log", &limit, "1000000"], vec![]),
    ]
    .iter()
    .map(|(head, tail)| (owned(head), owned(tail)))
    .collect();
    let limiters = Arc::new(limiters);
    let start = Arc::new(Barrier::new(CONNECTIONS));
    let racers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (limiters, start) = (Arc::clone(&limiters), Arc::clone(&start));
            let mut con = server.connect();
            thread::spawn(move || {
                start.wait();
                let mut admitted = vec![0usize; limiters.len()];
                for _ in 0..REQUESTS_PER_CONNECTION {
                    for (i, limiter) in limiters.iter().enumerate() {
                        let reply = ints(&mut con, &request(limiter, 1));
                        admitted[i] += usize::from(reply[0] == 0);
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = vec![0usize; limiters.len()];
    for racer in racers {
        for (total, count) in admitted.iter_mut().zip(racer.join().unwrap()) {
            *total += count;
        }
    }
    const { assert!(CONNECTIONS * REQUESTS_PER_CONNECTION > LIMIT) };
    assert_eq!(admitted, vec![LIMIT; limiters.len()], "{:?}", limiters);
    // And the state agrees: nothing remains.
    let mut con = server.connect();
    for limiter in limiters.iter() {
        let peek = ints(&mut con, &request(limiter, 0));
        assert_eq!(peek[..3], [0, LIMIT as i64, 0], "{limiter:?}");
    }
}
