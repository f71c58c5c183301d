//! One mixed workload over every command and algorithm, for the tests that move limiter
//! state between servers (replicas, persistence, Cluster): it writes, snapshots what it
//! wrote, and checks that each limit goes on where it stopped.
//!
//! Every limit is slow (a token per day, windows of days) so that nothing refills while a
//! test runs: the same peek gives the same reply minutes later, on any server.

use redis::{Connection, ConnectionLike};

use super::{ints, query};

/// A key's serialized value (`DUMP`) and absolute expiry in ms, or `None` when it does not
/// exist. DUMP serializes strings and the log type alike.
pub type State = Option<(Vec<u8>, i64)>;

/// The peek reply's first three fields: limited, limit, remaining (the other two count
/// down with time).
pub type Standing = [i64; 3];

/// The limiter kinds: every command, every algorithm, seconds and milliseconds.
const KINDS: usize = 7;
/// Request patterns per kind: 1 to 5 requests of 1 and then a 2, a peek and an oversized
/// request; or, for the last, only a peek and an oversized request (the key never exists).
const SHAPES: usize = 6;
const PEEK_ONLY: usize = SHAPES - 1;

/// One limiter: its command up to the quantity, and the keywords after it.
#[derive(Clone, Debug)]
pub struct Limiter {
    /// The key.
    pub key: String,
    command: Vec<String>,
    keywords: Vec<&'static str>,
    requests: usize,
}

impl Limiter {
    /// The `i`th limiter, with key `key`.
    fn new(i: usize, key: String) -> Limiter {
        let words = |words: &[&str]| words.iter().map(|word| word.to_string()).collect();
        let (command, keywords): (Vec<String>, Vec<&str>) = match i % KINDS {
            // 30 a month: a token a day.
            0 => (
                words(&["CL.THROTTLE", &key, &(i % 3).to_string(), "30", "2592000"]),
                vec![],
            ),
            // 10 per 10^10 ms: a token every 11 days.
            1 => (
                words(&["CL.THROTTLE", &key, "2", "10", "10000000000"]),
                vec!["MS"],
            ),
            2 => (words(&["RL.WINDOW", &key, "5", "1000000"]), vec!["FIXED"]),
            3 => (
                words(&["RL.WINDOW", &key, "5", "1000000000"]),
                vec!["SLIDING", "MS"],
            ),
            4 => (
                words(&["RL.WINDOW", &key, "5", "1000000"]),
                vec!["BUCKETS", "60"],
            ),
            5 => (words(&["RL.LOG", &key, "5", "1000000"]), vec![]),
            _ => (words(&["RL.LOG", &key, "5", "1000000000"]), vec!["MS"]),
        };
        Limiter {
            key,
            command,
            keywords,
            requests: (i / KINDS) % SHAPES,
        }
    }

    /// Whether the limiter is an `RL.LOG`, whose key is of the module's own type.
    pub fn is_log(&self) -> bool {
        self.command[0] == "RL.LOG"
    }

    /// The same limiter on another key.
    fn on_key(&self, key: String) -> Limiter {
        let mut command = self.command.clone();
        command[1].clone_from(&key);
        Limiter {
            key,
            command,
            ..self.clone()
        }
    }

    /// The full command for a request of `quantity`.
    pub fn request(&self, quantity: i64) -> Vec<String> {
        let mut command = self.command.clone();
        command.push(quantity.to_string());
        command.extend(self.keywords.iter().map(|word| word.to_string()));
        command
    }

    fn call(&self, con: &mut impl ConnectionLike, quantity: i64) -> Vec<i64> {
        ints(con, &self.request(quantity))
    }

    /// Whether the workload leaves the key in existence.
    fn exists_after_workload(&self) -> bool {
        self.requests != PEEK_ONLY
    }
}

/// Limiters of every kind and shape, with their keys.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The limiters, in order.
    pub limiters: Vec<Limiter>,
}

impl Workload {
    /// `count` limiters with keys `<prefix><i>` (all kinds and shapes from 42 on).
    pub fn new(prefix: &str, count: usize) -> Workload {
        Workload {
            limiters: (0..count)
                .map(|i| Limiter::new(i, format!("{prefix}{i}")))
                .collect(),
        }
    }

    /// The same workload without RL.LOG: only plain string keys, which a server without
    /// the module holds too.
    pub fn without_log(mut self) -> Workload {
        self.limiters.retain(|limiter| !limiter.is_log());
        self
    }

    /// The same limiters on the keys `rename` makes of theirs.
    pub fn renamed(&self, rename: impl Fn(&str) -> String) -> Workload {
        Workload {
            limiters: self
                .limiters
                .iter()
                .map(|limiter| limiter.on_key(rename(&limiter.key)))
                .collect(),
        }
    }

    /// The keys.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.limiters.iter().map(|limiter| limiter.key.as_str())
    }

    /// Admitted, refused, peeked and oversized requests on every limiter, checking that the
    /// peek and the oversized request are answered without being admitted.
    pub fn run(&self, con: &mut impl ConnectionLike) {
        for limiter in &self.limiters {
            if limiter.exists_after_workload() {
                for _ in 0..=limiter.requests {
                    limiter.call(con, 1);
                }
                limiter.call(con, 2);
            }
            assert_eq!(limiter.call(con, 0)[0], 0, "{limiter:?}");
            assert_eq!(limiter.call(con, 1_000)[0], 1, "{limiter:?}");
        }
    }

    /// A request of 1 to each of the first `count` limiters, in one `MULTI`/`EXEC`.
    pub fn run_transaction(&self, con: &mut Connection, count: usize) {
        let _: () = query(con, &["MULTI"]);
        for limiter in &self.limiters[..count] {
            let _: () = query(con, &limiter.request(1));
        }
        let replies: Vec<Vec<i64>> = query(con, &["EXEC"]);
        assert_eq!(replies.len(), count);
    }

    /// Every key's state.
    pub fn states(&self, con: &mut impl ConnectionLike) -> Vec<State> {
        self.keys().map(|key| state(con, key)).collect()
    }

    /// Checks that the keys exist exactly where the workload leaves them.
    pub fn assert_written(&self, states: &[State]) {
        for (limiter, state) in self.limiters.iter().zip(states) {
            assert_eq!(
                state.is_some(),
                limiter.exists_after_workload(),
                "{limiter:?}"
            );
        }
    }

    /// Every limiter's standing, by a peek.
    pub fn standings(&self, con: &mut impl ConnectionLike) -> Vec<Standing> {
        self.limiters
            .iter()
            .map(|limiter| {
                let reply = limiter.call(con, 0);
                [reply[0], reply[1], reply[2]]
            })
            .collect()
    }

    /// Checks that each limit goes on where `before` left it: the same standing, then a
    /// request of 1 refused where nothing remained (a limited key stays limited) and
    /// admitted with one less remaining elsewhere.
    pub fn assert_continues(&self, con: &mut impl ConnectionLike, before: &[Standing]) {
        assert_eq!(self.standings(con), before);
        for (limiter, [_, limit, remaining]) in self.limiters.iter().zip(before) {
            let reply = limiter.call(con, 1);
            let expected = if *remaining == 0 {
                [1, *limit, 0]
            } else {
                [0, *limit, remaining - 1]
            };
            assert_eq!(reply[..3], expected, "{limiter:?}");
        }
    }
}

/// `key`'s state.
pub fn state(con: &mut impl ConnectionLike, key: &str) -> State {
    let dump: Option<Vec<u8>> = query(con, &["DUMP", key]);
    let expire_at: i64 = query(con, &["PEXPIRETIME", key]);
    dump.map(|dump| (dump, expire_at))
}
