//! Replication and AOF, differentially: random valid calls of every command, with every
//! option combination the grammar accepts (a quantity, a unit, `REFUND`, `BLOCK`, `DELAY`,
//! `AT_MOST`, `FORCE`, `WARMUP`, every algorithm), `RL.ALL` over mixed limiters leases
//! included, the leases' release and renewal, the `_RO` variants, and calls inside
//! `MULTI`/`EXEC`, sent to a master with a replica and an AOF. Every key's value (`DUMP`) and
//! absolute expiry (`PEXPIRETIME`) must then be the same on the master, on the replica, and
//! on a fresh server that loaded the master's AOF; the master and the replica are also
//! compared along the way.
//!
//! `DIFF_CALLS` (default 4,000) and `DIFF_SEED` change the run; `make stress` runs a long one
//! with a random seed. A failure prints the seed and every call that touched the key.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use redis::{Connection, Value};
use support::{query, wait_for_replicas, Server};

/// A small, seedable generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The kinds of limiter a key holds: each key keeps its kind for the whole run (parameters
/// change from call to call, as a deployment changing its limits does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Throttle,
    WarmThrottle,
    Fixed,
    Sliding,
    Buckets,
    Anchored,
    Log,
    Lease,
    /// `RL.ALL`'s load gate only: its key is a service's, which reports and policies fill.
    Load,
}

const KINDS: [Kind; 9] = [
    Kind::Throttle,
    Kind::WarmThrottle,
    Kind::Fixed,
    Kind::Sliding,
    Kind::Buckets,
    Kind::Anchored,
    Kind::Log,
    Kind::Lease,
    Kind::Load,
];

/// Keys per kind: few, so that states build up and calls meet each other.
const KEYS_PER_KIND: u64 = 6;

/// A random [`span`] in a random unit: the unit's keyword and the value (rounded up to a
/// whole unit).
fn duration(rng: &mut Rng) -> (&'static str, u64) {
    let micros = span(rng);
    match rng.below(4) {
        0 => ("MS", micros.div_ceil(1_000).max(1)),
        1 => ("US", micros.max(1)),
        _ => ("S", micros.div_ceil(1_000_000).max(1)),
    }
}

/// A window or period: mostly long enough for the key to outlive the run (so the final
/// comparison sees it), sometimes a fraction of a second (so that keys expire and restart
/// while the run goes on).
fn span(rng: &mut Rng) -> u64 {
    match rng.below(10) {
        0..=1 => 50_000 + rng.below(900_000),
        2..=3 => 1_000_000 + rng.below(5_000_000),
        _ => 60_000_000 + rng.below(3_600_000_000),
    }
}

/// One limiter's words after its keyword (as `RL.ALL` takes them), its limit, and the unit
/// its durations are in.
struct Limiter {
    words: Vec<String>,
    limit: u64,
    unit: &'static str,
}

fn limiter(rng: &mut Rng, kind: Kind) -> Limiter {
    let (unit, window) = duration(rng);
    let limit = 1 + rng.below(8);
    let words = match kind {
        Kind::Throttle | Kind::WarmThrottle => {
            let burst = rng.below(limit);
            let mut words = vec![
                "THROTTLE".to_owned(),
                burst.to_string(),
                limit.to_string(),
                window.to_string(),
            ];
            if kind == Kind::WarmThrottle {
                words.extend([
                    "WARMUP".to_owned(),
                    (window * (1 + rng.below(3))).to_string(),
                ]);
            }
            return Limiter {
                words,
                limit: burst + 1,
                unit,
            };
        }
        Kind::Fixed => vec!["WINDOW", &limit.to_string(), &window.to_string(), "FIXED"]
            .into_iter()
            .map(str::to_owned)
            .collect(),
        Kind::Sliding => vec![
            "WINDOW".to_owned(),
            limit.to_string(),
            window.to_string(),
            "SLIDING".to_owned(),
        ],
        Kind::Buckets => vec![
            "WINDOW".to_owned(),
            limit.to_string(),
            window.to_string(),
            "BUCKETS".to_owned(),
            (2 + rng.below(8)).to_string(),
        ],
        Kind::Anchored => vec![
            "WINDOW".to_owned(),
            limit.to_string(),
            window.to_string(),
            "ANCHORED".to_owned(),
        ],
        Kind::Log => vec!["LOG".to_owned(), limit.to_string(), window.to_string()],
        Kind::Lease => vec!["LEASE".to_owned(), limit.to_string(), window.to_string()],
        Kind::Load => {
            let priority = rng.pick(&[
                "critical_plus",
                "critical",
                "sheddable_plus",
                "sheddable",
                "2",
            ]);
            // The gate takes any quantity: the others' limits bound the call's.
            return Limiter {
                words: vec!["LOAD".to_owned(), priority.to_string()],
                limit,
                unit,
            };
        }
    };
    Limiter { words, limit, unit }
}

/// The single command for `limiter` on `key`: its name, then the key and the parameters,
/// with a window's algorithm moved after the optional quantity as the grammar wants.
fn single(key: &str, kind: Kind, limiter: &Limiter, read_only: bool) -> (Vec<String>, Vec<String>) {
    let ro = if read_only { "_RO" } else { "" };
    let params = &limiter.words[1..];
    match kind {
        Kind::Throttle | Kind::WarmThrottle => {
            let (head, warmup) = params.split_at(3);
            let mut command = vec![format!("CL.THROTTLE{ro}"), key.to_owned()];
            command.extend_from_slice(head);
            (command, warmup.to_vec())
        }
        Kind::Fixed | Kind::Sliding | Kind::Buckets | Kind::Anchored => {
            let mut command = vec![format!("RL.WINDOW{ro}"), key.to_owned()];
            command.extend_from_slice(&params[..2]);
            (command, params[2..].to_vec())
        }
        Kind::Log => {
            let mut command = vec![format!("RL.LOG{ro}"), key.to_owned()];
            command.extend_from_slice(params);
            (command, Vec::new())
        }
        Kind::Lease => {
            let mut command = vec![format!("RL.ACQUIRE{ro}"), key.to_owned()];
            command.extend_from_slice(params);
            (command, Vec::new())
        }
        Kind::Load => unreachable!("a load gate has no single command"),
    }
}

/// The optional arguments of a call: a quantity, the unit, then options in the combinations
/// the grammar accepts (none of them with a lease, no shortfall rule with a load gate);
/// `read_only` leaves out `REFUND`.
fn options(
    rng: &mut Rng,
    limit: u64,
    unit: &str,
    (lease, gate): (bool, bool),
    read_only: bool,
) -> Vec<String> {
    let mut words = Vec::new();
    let quantity = match rng.below(10) {
        0 => 0,
        1 => limit + 1 + rng.below(3),
        _ => 1 + rng.below(limit),
    };
    words.push(quantity.to_string());
    words.push(unit.to_owned());
    if lease {
        return words;
    }
    let refund = !read_only && rng.chance(12);
    if refund {
        words.push("REFUND".to_owned());
        return words;
    }
    let block = rng.chance(15);
    if block {
        let (_, value) = duration(rng);
        words.extend(["BLOCK".to_owned(), value.to_string()]);
    }
    if gate {
        return words;
    }
    match rng.below(10) {
        0 if !block => {
            let max_wait = [0, 1, 5, 60, 100_000][rng.below(5) as usize];
            words.extend(["DELAY".to_owned(), max_wait.to_string()]);
        }
        1 | 2 => words.push("AT_MOST".to_owned()),
        3 if !block && quantity <= limit * 16 => words.push("FORCE".to_owned()),
        _ => {}
    }
    words
}

/// What the run remembers: the leases taken (to release and renew), and every call that
/// touched each key (for a failure's report).
#[derive(Default)]
struct History {
    leases: BTreeMap<String, Vec<i64>>,
    calls: BTreeMap<String, Vec<String>>,
}

impl History {
    fn touched(&mut self, keys: &[String], call: &[String], reply: &str) {
        for key in keys {
            let line = format!("{} -> {reply}", call.join(" "));
            self.calls.entry(key.clone()).or_default().push(line);
        }
    }
}

fn key_name(kind: Kind, index: u64) -> String {
    format!("{kind:?}:{index}").to_lowercase()
}

/// One random valid call, and the keys it names.
fn call(rng: &mut Rng, history: &History) -> (Vec<String>, Vec<String>) {
    let read_only = rng.chance(10);
    match rng.below(20) {
        // RL.ALL over 1 to 4 limiters of distinct kinds in one hash slot.
        0..=3 => {
            let tag = rng.below(KEYS_PER_KIND);
            let mut kinds = KINDS.to_vec();
            let count = 1 + rng.below(4) as usize;
            let mut chosen = Vec::new();
            while chosen.len() < count {
                let kind = kinds.remove(rng.below(kinds.len() as u64) as usize);
                chosen.push(kind);
            }
            let lease = chosen.contains(&Kind::Lease);
            let gate = chosen.contains(&Kind::Load);
            let unit = *rng.pick(&["S", "MS", "US"]);
            let keys: Vec<String> = chosen
                .iter()
                .map(|kind| format!("{{all{tag}}}:{kind:?}").to_lowercase())
                .collect();
            let mut command = vec![
                if read_only { "RL.ALL_RO" } else { "RL.ALL" }.to_owned(),
                keys.len().to_string(),
            ];
            command.extend(keys.iter().cloned());
            let mut least = u64::MAX;
            for &kind in &chosen {
                // Every duration in the call's one unit.
                let mut limiter = limiter(rng, kind);
                while limiter.unit != unit {
                    limiter = self::limiter(rng, kind);
                }
                least = least.min(limiter.limit);
                command.extend(limiter.words);
            }
            command.extend(options(rng, least, unit, (lease, gate), read_only));
            if rng.chance(20) {
                command.push("DETAILS".to_owned());
            }
            (command, keys)
        }
        // A lease given back or renewed.
        4 => {
            let key = key_name(Kind::Lease, rng.below(KEYS_PER_KIND));
            let id = history
                .leases
                .get(&key)
                .and_then(|ids| ids.last().copied())
                .unwrap_or(1);
            let command = if rng.chance(50) {
                vec!["RL.RELEASE".to_owned(), key.clone(), id.to_string()]
            } else {
                let (unit, lease) = duration(rng);
                vec![
                    "RL.RENEW".to_owned(),
                    key.clone(),
                    id.to_string(),
                    lease.to_string(),
                    unit.to_owned(),
                ]
            };
            (command, vec![key])
        }
        // A service's load: an instance's report, or its policy set or reset.
        5 => {
            let key = format!("{{all{}}}:load", rng.below(KEYS_PER_KIND));
            let command = if rng.chance(75) {
                let instance = format!("i{}", rng.below(4));
                let ttl = [200, 1_000, 60_000, 3_600_000][rng.below(4) as usize];
                let mut command = vec![
                    "RL.LOAD.REPORT".to_owned(),
                    key.clone(),
                    instance,
                    ttl.to_string(),
                ];
                for factor in [
                    "cpu",
                    "memory",
                    "latency",
                    "inflight",
                    "max_rps",
                    "min_rt",
                    "requests",
                    "successes",
                ] {
                    if rng.chance(50) {
                        let value = match factor {
                            "cpu" | "memory" => format!("0.{}", rng.below(100)),
                            _ => rng.below(500).to_string(),
                        };
                        command.extend([factor.to_owned(), value]);
                    }
                }
                if command.len() == 4 {
                    command.extend(["cpu".to_owned(), "0.5".to_owned()]);
                }
                command
            } else if rng.chance(30) {
                vec![
                    "RL.LOAD.POLICY".to_owned(),
                    key.clone(),
                    "DEFAULT".to_owned(),
                ]
            } else {
                let first = 0.3 + rng.below(40) as f64 / 100.0;
                let hold = [0, 500, 2_000][rng.below(3) as usize];
                let half = *rng.pick(&["0.5", "0.25", "0"]);
                vec![
                    "RL.LOAD.POLICY".to_owned(),
                    key.clone(),
                    "HOLD".to_owned(),
                    hold.to_string(),
                    "LEVEL".to_owned(),
                    "cpu".to_owned(),
                    format!("{first:.2}"),
                    "bbr".to_owned(),
                    "1".to_owned(),
                    "SHARES".to_owned(),
                    "1".to_owned(),
                    "1".to_owned(),
                    "1".to_owned(),
                    half.to_owned(),
                    "LEVEL".to_owned(),
                    "cpu".to_owned(),
                    format!("{:.2}", first + 0.2),
                    "SHARES".to_owned(),
                    "1".to_owned(),
                    "0.5".to_owned(),
                    "0".to_owned(),
                    "0".to_owned(),
                ]
            };
            (command, vec![key])
        }
        _ => {
            let kinds: Vec<Kind> = KINDS
                .iter()
                .copied()
                .filter(|kind| *kind != Kind::Load)
                .collect();
            let kind = *rng.pick(&kinds);
            let key = key_name(kind, rng.below(KEYS_PER_KIND));
            let limiter = limiter(rng, kind);
            let (mut command, after) = single(&key, kind, &limiter, read_only);
            let lease = kind == Kind::Lease;
            let mut optional = options(rng, limiter.limit, limiter.unit, (lease, false), read_only);
            // The quantity first, then the command's own keywords (an algorithm, WARMUP).
            let rest = optional.split_off(1);
            command.extend(optional);
            command.extend(after);
            command.extend(rest);
            (command, vec![key])
        }
    }
}

/// A reply, as text, and the lease id in it when the call took a lease.
fn read_reply(value: &Value) -> (String, Option<i64>) {
    match value {
        Value::Array(items) => {
            let ints: Vec<i64> = items
                .iter()
                .filter_map(|item| match item {
                    Value::Int(int) => Some(*int),
                    _ => None,
                })
                .collect();
            let id = (ints.len() >= 6 && ints[0] == 0 && ints[5] > 1_000_000).then(|| ints[5]);
            (format!("{ints:?}"), id)
        }
        Value::Int(int) => (int.to_string(), None),
        other => (format!("{other:?}"), None),
    }
}

/// Every key's `DUMP` and `PEXPIRETIME`.
type Snapshot = BTreeMap<String, (Vec<u8>, i64)>;

fn snapshot(con: &mut Connection) -> Snapshot {
    let keys: Vec<String> = query(con, &["KEYS", "*"]);
    keys.into_iter()
        .filter_map(|key| {
            let dump: Option<Vec<u8>> = query(con, &["DUMP", &key]);
            let expire_at: i64 = query(con, &["PEXPIRETIME", &key]);
            // -2: the key expired between the two reads, so it is gone.
            dump.filter(|_| expire_at != -2)
                .map(|dump| (key, (dump, expire_at)))
        })
        .collect()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The keys of `copies` that differ from the master's, among those that outlive `until`
/// (ms) everywhere: a key about to expire may already be gone on a copy that loads later.
fn differences(master: &Snapshot, copy: &Snapshot, until: i64) -> Vec<String> {
    let lasting = |snapshot: &Snapshot| -> BTreeSet<String> {
        snapshot
            .iter()
            .filter(|(_, (_, expire_at))| *expire_at == -1 || *expire_at > until)
            .map(|(key, _)| key.clone())
            .collect()
    };
    let keys: BTreeSet<String> = lasting(master).union(&lasting(copy)).cloned().collect();
    keys.into_iter()
        .filter(|key| master.get(key) != copy.get(key))
        .collect()
}

fn report(seed: u64, copy: &str, keys: &[String], history: &History, snapshots: &[&Snapshot]) {
    let mut text = format!(
        "DIFF_SEED={seed}: {} key(s) differ on the {copy}:\n",
        keys.len()
    );
    for key in keys.iter().take(5) {
        text.push_str(&format!("\n== {key}\n"));
        for (name, snapshot) in ["master", copy].iter().zip(snapshots) {
            let held = snapshot.get(key).map(|(dump, expire_at)| {
                let hex: String = dump.iter().map(|byte| format!("{byte:02x}")).collect();
                format!("{hex} expires {expire_at}")
            });
            text.push_str(&format!("{name}: {held:?}\n"));
        }
        for line in history.calls.get(key).into_iter().flatten() {
            text.push_str(&format!("  {line}\n"));
        }
    }
    panic!("{text}");
}

#[test]
fn the_replica_and_the_aof_hold_exactly_what_the_master_holds() {
    let seed = env_number("DIFF_SEED", 0x0d1f_f5ee_d038);
    let calls = env_number("DIFF_CALLS", 4_000);
    let master = Server::builder().aof().start();
    let replica = Server::start_replica(&master);
    let mut con = master.connect();
    let mut rng = Rng(seed | 1);
    let mut history = History::default();
    let mut sent = 0;
    while sent < calls {
        // A batch of calls, some of them in one MULTI/EXEC.
        let in_transaction = rng.chance(15);
        let batch: Vec<(Vec<String>, Vec<String>)> =
            (0..if in_transaction { 2 + rng.below(4) } else { 50 })
                .map(|_| call(&mut rng, &history))
                .collect();
        sent += batch.len() as u64;
        let mut pipe = redis::pipe();
        if in_transaction {
            pipe.atomic();
        }
        for (command, _) in &batch {
            pipe.add_command(support::command(command));
        }
        let replies: Vec<Value> = pipe.query(&mut con).unwrap_or_else(|error| {
            panic!("DIFF_SEED={seed}: a batch failed: {error}\n{:?}", batch)
        });
        for ((command, keys), reply) in batch.iter().zip(&replies) {
            let (text, id) = read_reply(reply);
            if let Value::ServerError(error) = reply {
                panic!("DIFF_SEED={seed}: {} -> {error:?}", command.join(" "));
            }
            if let (Some(id), false) = (id, command[0].ends_with("_RO")) {
                for key in keys.iter().filter(|key| key.contains("lease")) {
                    history.leases.entry(key.clone()).or_default().push(id);
                }
            }
            history.touched(keys, command, &text);
        }
        // Along the way: the replica holds what the master holds.
        if sent % 1_000 < batch.len() as u64 {
            wait_for_replicas(&mut con, 1);
            let _: () = query(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
            let (on_master, on_replica) = (snapshot(&mut con), snapshot(&mut replica.connect()));
            let _: () = query(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]);
            let differ = differences(&on_master, &on_replica, now_ms() + 1_000);
            if !differ.is_empty() {
                report(
                    seed,
                    "replica",
                    &differ,
                    &history,
                    &[&on_master, &on_replica],
                );
            }
        }
    }
    wait_for_replicas(&mut con, 1);
    let _: () = query(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let on_master = snapshot(&mut con);
    let on_replica = snapshot(&mut replica.connect());
    let from_aof = master.start_from_aof_copy();
    let on_aof = snapshot(&mut from_aof.connect());
    // Keys that outlive the fresh server's load by a margin, on every server.
    let until = now_ms() + 2_000;
    let lasting = on_master
        .values()
        .filter(|(_, expire_at)| *expire_at > until)
        .count();
    assert!(
        lasting > 30,
        "DIFF_SEED={seed}: only {lasting} keys to compare"
    );
    eprintln!(
        "DIFF_SEED={seed}: {calls} calls, {} keys on the master, {lasting} compared on the replica and the AOF's server",
        on_master.len()
    );
    for (copy, snapshot) in [
        ("replica", &on_replica),
        ("server loaded from the AOF", &on_aof),
    ] {
        let differ = differences(&on_master, snapshot, until);
        if !differ.is_empty() {
            report(seed, copy, &differ, &history, &[&on_master, snapshot]);
        }
    }
}
