//! Moving a slot that holds every kind of limiter key while a client writes to it: atomic
//! slot migration (Valkey 9's `CLUSTER MIGRATESLOTS`, Redis 8.4's `CLUSTER MIGRATION IMPORT`)
//! and `redis-cli --cluster reshard` (which uses atomic slot migration where every node has
//! it, `MIGRATE` key by key otherwise), on two masters with the module loaded on both.
//!
//! After each move, on the node that serves the slot:
//! - a move without writes leaves every key byte-identical, value and absolute expiry;
//! - with writes during the move, every limiter records exactly the admissions the client
//!   was told about (`limit - remaining`), the GCRA's TAT is the one before plus one emission
//!   interval per admission, and every lease id the client was given is held there.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use redis::Connection;
use support::cluster::Cluster;
use support::workload::{state, State};
use support::{ints, query, wait_until, ServerRelease};

/// The hash tag of every key: they all live in one slot.
const TAG: &str = "{asm}";

/// Keys of each kind the slot holds besides the ones written during the move, so that its
/// snapshot takes a while to send.
const FILLERS: usize = 2_000;

/// Rounds of writes the client makes before a move starts, and at least after it ends.
const ROUNDS_AROUND: usize = 100;

/// One limiter the client writes to: its key and its call (quantity 1), never refused
/// during a test. `limit - remaining` counts what it admitted.
struct Limiter {
    key: String,
    call: Vec<String>,
    /// Where the quantity is in the call.
    quantity_at: usize,
}

impl Limiter {
    /// `command key required... 1 keywords...`.
    fn new(name: &str, command: &str, required: &[&str], keywords: &[&str]) -> Limiter {
        let key = format!("{TAG}:{name}");
        let mut call = vec![command.to_owned(), key.clone()];
        call.extend(required.iter().map(|word| word.to_string()));
        let quantity_at = call.len();
        call.push("1".to_owned());
        call.extend(keywords.iter().map(|word| word.to_string()));
        Limiter {
            key,
            call,
            quantity_at,
        }
    }

    /// The read-only variant's peek: the standing, written nowhere.
    fn peek(&self, con: &mut Connection) -> Vec<i64> {
        let mut peek = self.call.clone();
        peek[0].push_str("_RO");
        peek[self.quantity_at] = "0".to_owned();
        ints(con, &peek)
    }
}

/// GCRA: bursts of a million, one token an hour: each admission adds an hour to the TAT,
/// and nothing refills while the test runs.
const EMISSION_HOURS: i128 = 1;

fn limiters() -> Vec<Limiter> {
    // Windows of 10^9 s: the next boundary is in 2033.
    let window = ["1000000", "1000000000"];
    vec![
        Limiter::new("throttle", "CL.THROTTLE", &["999999", "1", "3600"], &[]),
        Limiter::new("fixed", "RL.WINDOW", &window, &["FIXED"]),
        Limiter::new("buckets", "RL.WINDOW", &window, &["BUCKETS", "6"]),
        Limiter::new("log", "RL.LOG", &window, &[]),
        Limiter::new("lease", "RL.ACQUIRE", &["65536", "1000000000"], &[]),
    ]
}

/// The keys `RL.ALL` charges together, and its call.
fn all_call() -> (Vec<String>, Vec<String>) {
    let keys = vec![format!("{TAG}:all:throttle"), format!("{TAG}:all:window")];
    let mut call: Vec<String> = vec!["RL.ALL".into(), "2".into()];
    call.extend(keys.iter().cloned());
    call.extend(
        "THROTTLE 999999 1 3600 WINDOW 1000000 1000000000 SLIDING"
            .split(' ')
            .map(str::to_owned),
    );
    (keys, call)
}

/// The slot of a key, as Redis Cluster hashes it (CRC16/XMODEM of the hash tag).
fn key_slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for &byte in tag.trim_matches(['{', '}']).as_bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// What the client saw admitted.
#[derive(Default)]
struct Admitted {
    /// Per limiter of [`limiters`], in order.
    counts: Vec<i64>,
    /// The lease ids `RL.ACQUIRE` gave, in order.
    lease_ids: Vec<i64>,
    /// `RL.ALL`'s admissions.
    all: i64,
}

/// A client writing to every limiter of the slot, round after round, through a
/// cluster-aware connection (which follows `MOVED` and `ASK`), until told to stop.
struct Writer {
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicUsize>,
    handle: thread::JoinHandle<Admitted>,
}

impl Writer {
    fn start(cluster: &Cluster) -> Writer {
        let mut con = cluster.connect();
        let (stop, rounds) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (stop_seen, rounds_done) = (stop.clone(), rounds.clone());
        let handle = thread::spawn(move || {
            let limiters = limiters();
            let (_, all) = all_call();
            let mut admitted = Admitted {
                counts: vec![0; limiters.len()],
                ..Admitted::default()
            };
            while !stop_seen.load(Ordering::Relaxed) {
                for (limiter, count) in limiters.iter().zip(&mut admitted.counts) {
                    let reply = ints(&mut con, &limiter.call);
                    assert_eq!(reply[0], 0, "{:?} refused: {reply:?}", limiter.call);
                    *count += 1;
                    if let Some(&id) = reply.get(5) {
                        admitted.lease_ids.push(id);
                    }
                }
                let reply = ints(&mut con, &all);
                assert_eq!(reply[0], 0, "RL.ALL refused: {reply:?}");
                admitted.all += 1;
                rounds_done.fetch_add(1, Ordering::Relaxed);
            }
            admitted
        });
        Writer {
            stop,
            rounds,
            handle,
        }
    }

    /// Waits (bounded) until `more` rounds have been written from now.
    fn wait_for_rounds(&self, more: usize) {
        let target = self.rounds.load(Ordering::Relaxed) + more;
        let done = wait_until(Duration::from_secs(60), || {
            self.handle.is_finished() || self.rounds.load(Ordering::Relaxed) >= target
        });
        assert!(done && !self.handle.is_finished(), "the writer stopped");
    }

    fn stop(self) -> Admitted {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("the writer failed")
    }
}

/// A direct connection to the node on `port`.
fn direct(cluster: &Cluster, port: u16) -> Connection {
    cluster.node(port).connect()
}

/// Writes the slot's keys on `port`: a request to each limiter, and the fillers.
fn fill(con: &mut Connection) {
    for limiter in limiters() {
        assert_eq!(ints(con, &limiter.call)[0], 0);
    }
    assert_eq!(ints(con, &all_call().1)[0], 0);
    let mut pipe = redis::pipe();
    for i in 0..FILLERS {
        pipe.cmd("CL.THROTTLE")
            .arg(format!("{TAG}:fill:t{i}"))
            .arg(&["9", "1", "86400"][..])
            .ignore();
        pipe.cmd("RL.LOG")
            .arg(format!("{TAG}:fill:l{i}"))
            .arg(&["9", "86400", "2"][..])
            .ignore();
    }
    let _: () = pipe.query(con).unwrap();
}

/// Every key of the slot, sorted.
fn keys(con: &mut Connection, slot: u16) -> Vec<String> {
    let mut keys: Vec<String> = query(
        con,
        &["CLUSTER", "GETKEYSINSLOT", &slot.to_string(), "100000"],
    );
    keys.sort();
    keys
}

fn states(con: &mut Connection, keys: &[String]) -> Vec<State> {
    keys.iter().map(|key| state(con, key)).collect()
}

/// What the slot's limiters record before a move with writes: the peeks, and the GCRA's TAT.
struct Before {
    remaining: Vec<i64>,
    all_remaining: [i64; 2],
    tat: u128,
}

/// The TAT of a `CL.THROTTLE` key, in ticks of 2^-24 ns (the 11 bytes after its tag).
fn tat(con: &mut Connection, key: &str) -> u128 {
    let value: Vec<u8> = query(con, &["GET", key]);
    assert_eq!((value.len(), value[0]), (14, 0xF8), "{value:?}");
    let mut bytes = [0; 16];
    bytes[..11].copy_from_slice(&value[1..12]);
    u128::from_le_bytes(bytes)
}

fn before(con: &mut Connection) -> Before {
    let (all_keys, _) = all_call();
    Before {
        remaining: limiters().iter().map(|l| l.peek(con)[2]).collect(),
        all_remaining: [
            ints(
                con,
                &["CL.THROTTLE_RO", &all_keys[0], "999999", "1", "3600", "0"],
            )[2],
            ints(
                con,
                &["RL.WINDOW_RO", &all_keys[1], "1000000", "1000000000", "0"],
            )[2],
        ],
        tat: tat(con, &limiters()[0].key),
    }
}

/// Checks on `con` (the slot's node now) that every limiter records exactly what the client
/// was told it admitted since `before`.
fn assert_recorded(con: &mut Connection, before: &Before, admitted: &Admitted) {
    let limiters = limiters();
    for ((limiter, remaining), count) in
        limiters.iter().zip(&before.remaining).zip(&admitted.counts)
    {
        assert!(*count > 0);
        let after = limiter.peek(con)[2];
        assert_eq!(
            remaining - after,
            *count,
            "{}: the key records {} admissions, the client saw {count}",
            limiter.key,
            remaining - after
        );
    }
    let after = self::before(con);
    for (key, (before, after)) in all_call()
        .0
        .iter()
        .zip(before.all_remaining.iter().zip(after.all_remaining))
    {
        assert_eq!(before - after, admitted.all, "{key}");
    }
    // The TAT is the one before plus an emission interval per admission: the bytes the
    // client's writes made, wherever they ran.
    let interval = (EMISSION_HOURS as u128 * 3_600 * 1_000_000_000) << 24;
    let throttle = &limiters[0].key;
    let tat = tat(con, throttle);
    assert_eq!(tat, before.tat + interval * admitted.counts[0] as u128);
    let expire_at: i64 = query(con, &["PEXPIRETIME", throttle]);
    let nanos = tat >> 24;
    let ceil_millis =
        nanos / 1_000_000 + u128::from(nanos % 1_000_000 != 0 || tat % (1 << 24) != 0);
    assert_eq!(
        expire_at as u128, ceil_millis,
        "{throttle}'s absolute expiry"
    );
    // Every lease the client was given is held, under the id it was given.
    let lease = &limiters[4].key;
    let mut pipe = redis::pipe();
    for id in &admitted.lease_ids {
        pipe.cmd("RL.RELEASE").arg(lease).arg(id);
    }
    let released: Vec<i64> = pipe.query(con).unwrap();
    assert!(
        released.iter().all(|&held| held == 1),
        "{} of {} lease ids are not held",
        released.iter().filter(|&&held| held != 1).count(),
        released.len()
    );
}

/// Whether the server can migrate slots atomically, and how: Valkey 9+ or Redis 8.4+.
fn atomic_migration(release: ServerRelease) -> Option<&'static str> {
    match (release.valkey, release.version) {
        (true, version) if version >= (9, 0) => Some("CLUSTER MIGRATESLOTS"),
        (false, version) if version >= (8, 4) => Some("CLUSTER MIGRATION IMPORT"),
        _ => None,
    }
}

/// Moves `slot` from the node on `from` to the node on `to` with the server's own atomic
/// slot migration, and waits until every node agrees.
fn migrate_atomically(cluster: &Cluster, release: ServerRelease, slot: u16, from: u16, to: u16) {
    let slot_text = slot.to_string();
    if release.valkey {
        let target = cluster.id(to);
        let reply: String = query(
            &mut direct(cluster, from),
            &[
                "CLUSTER",
                "MIGRATESLOTS",
                "SLOTSRANGE",
                &slot_text,
                &slot_text,
                "NODE",
                &target,
            ],
        );
        assert_eq!(reply, "OK");
    } else {
        let _: redis::Value = query(
            &mut direct(cluster, to),
            &["CLUSTER", "MIGRATION", "IMPORT", &slot_text, &slot_text],
        );
    }
    cluster.wait_for_owner(slot, to);
}

#[test]
fn atomic_slot_migration_moves_every_limiter_exactly_with_writes_during_the_move() {
    let slot = key_slot(TAG);
    let cluster = Cluster::start_two(slot);
    let (first, second) = (cluster.nodes[0].port(), cluster.nodes[1].port());
    let release = ServerRelease::of(&mut direct(&cluster, first));
    let Some(how) = atomic_migration(release) else {
        let (name, (major, minor)) = (
            if release.valkey { "Valkey" } else { "Redis" },
            release.version,
        );
        eprintln!(
            "skipped: {name} {major}.{minor} has no atomic slot migration (Valkey 9+ has \
             CLUSTER MIGRATESLOTS, Redis 8.4+ CLUSTER MIGRATION IMPORT); the move by \
             redis-cli --cluster reshard is tested on every server"
        );
        return;
    };
    let slot_text = slot.to_string();
    let keyslot: i64 = query(&mut direct(&cluster, first), &["CLUSTER", "KEYSLOT", TAG]);
    assert_eq!(keyslot, i64::from(slot));
    fill(&mut direct(&cluster, first));

    // Without writes: every key arrives byte-identical, value and absolute expiry.
    let names = keys(&mut direct(&cluster, first), slot);
    assert_eq!(names.len(), 2 * FILLERS + 7, "{how}");
    let on_source = states(&mut direct(&cluster, first), &names);
    migrate_atomically(&cluster, release, slot, first, second);
    let mut target = direct(&cluster, second);
    assert_eq!(keys(&mut target, slot), names);
    assert_eq!(states(&mut target, &names), on_source, "after {how}");
    let left: i64 = query(
        &mut direct(&cluster, first),
        &["CLUSTER", "COUNTKEYSINSLOT", &slot_text],
    );
    assert_eq!(left, 0, "the source kept keys of the slot it gave away");

    // Back, with a client writing to the slot throughout.
    let before = before(&mut target);
    let writer = Writer::start(&cluster);
    writer.wait_for_rounds(ROUNDS_AROUND);
    migrate_atomically(&cluster, release, slot, second, first);
    writer.wait_for_rounds(ROUNDS_AROUND);
    let admitted = writer.stop();
    assert_recorded(&mut direct(&cluster, first), &before, &admitted);
    let left: i64 = query(&mut target, &["CLUSTER", "COUNTKEYSINSLOT", &slot_text]);
    assert_eq!(left, 0);
}

#[test]
fn resharding_with_redis_cli_keeps_every_admission_made_during_the_move() {
    let slot = key_slot(TAG);
    let cluster = Cluster::start_two(slot);
    let (first, second) = (cluster.nodes[0].port(), cluster.nodes[1].port());
    fill(&mut direct(&cluster, first));
    let before = before(&mut direct(&cluster, first));
    let masters = cluster.masters();
    let from = masters.iter().find(|m| m.port == first).unwrap();
    let to = masters.iter().find(|m| m.port == second).unwrap();
    let writer = Writer::start(&cluster);
    writer.wait_for_rounds(ROUNDS_AROUND);
    // The first node's lowest slot is the one holding the keys: `reshard` moves it first.
    cluster.reshard_slots(from, to, 1);
    cluster.wait_for_owner(slot, second);
    writer.wait_for_rounds(ROUNDS_AROUND);
    let admitted = writer.stop();
    assert_recorded(&mut direct(&cluster, second), &before, &admitted);
}
