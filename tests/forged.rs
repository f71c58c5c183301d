//! Forged state: stored bytes and effects no module wrote, met by every command. Keys are
//! filled with random and valid-looking versions of every stored type, mutated from real
//! states (bits flipped, truncated, extended, counters widened, fields set to the edges of
//! their range): string states written with `SET`, native values restored with `RESTORE`
//! from a real value's `DUMP` whose fields were changed (and whose checksum was made again);
//! and random effect lines are applied (`RL.LOG.APPLY`, `RL.LEASE.APPLY`, the AOF rewrite's
//! chunks, `RL.LOG.REPLAY`), which a module loaded with `debug-commands` accepts from any
//! client. Then every command is called on them.
//!
//! There must be no internal error and no panic: every reply is a well-formed answer, or a
//! clear `ERR` or `WRONGTYPE` after which every key the call named holds exactly what it
//! held (its value and its expiry); and every key keeps an expiry, but a service's load
//! holding a policy, which is configuration.
//!
//! `FORGED_ROUNDS` (default 20,000) and `FORGED_SEED` change the run; `make stress` runs it
//! longer, and `make valgrind` runs it under memcheck.

mod support;

use redis::{Connection, Value};
use support::{query, Server};

/// A small, seedable generator (xorshift64*): the same seed, the same run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The keys forged states go to: few, so that states, effects and commands meet. One hash
/// tag, so that `RL.ALL` may name any two.
const KEYS: [&str; 6] = ["{fg}a", "{fg}b", "{fg}c", "{fg}d", "{fg}e", "{fg}f"];

/// Integers at the edges of what a field may hold.
fn edge(rng: &mut Rng, now_us: i64) -> i64 {
    match rng.below(16) {
        0 => 0,
        1 => 1,
        2 => -1,
        3 => i64::MAX,
        4 => i64::MIN,
        5 => 1 << 53,
        6 => (1 << 54) - 1,
        7 => 1 << 54,
        8 => i64::MAX / 1_000,
        9 => i64::MAX / 1_000 + 1,
        10 => now_us,
        11 => now_us + rng.below(120_000_000) as i64,
        12 => now_us - rng.below(120_000_000) as i64,
        13 => rng.below(1_100) as i64,
        14 => rng.next() as i64,
        _ => 1 << 20,
    }
}

/// A real state of each kind, written by the commands themselves, that forgeries start
/// from.
fn real_calls(key: &str) -> Vec<Vec<String>> {
    let words = |words: &[&str]| words.iter().map(|word| word.to_string()).collect();
    vec![
        words(&["CL.THROTTLE", key, "5", "10", "60"]),
        words(&["CL.THROTTLE", key, "5", "10", "60", "1", "WARMUP", "30"]),
        words(&["CL.THROTTLE", key, "5", "10", "60", "BLOCK", "30"]),
        words(&["RL.WINDOW", key, "300", "60", "FIXED"]),
        words(&["RL.WINDOW", key, "70000", "60", "SLIDING"]),
        words(&["RL.WINDOW", key, "5", "60", "BUCKETS", "6"]),
        words(&["RL.WINDOW", key, "5", "60", "ANCHORED"]),
        words(&["RL.LOG", key, "5", "60"]),
        words(&["RL.LOG", key, "5", "60", "BLOCK", "30"]),
        words(&["RL.ACQUIRE", key, "5", "60"]),
    ]
}

/// A command on `key` (and, for `RL.ALL`, `other`), of any kind and with any option.
fn command(rng: &mut Rng, key: &str, other: &str) -> Vec<String> {
    let limit = rng
        .pick(&["1", "5", "300", "70000", "0", "1000000"])
        .to_string();
    let window = rng.pick(&["1", "60", "3600", "86400"]).to_string();
    let algorithm = rng
        .pick(&["FIXED", "SLIDING", "BUCKETS 6", "ANCHORED", ""])
        .to_string();
    let mut words: Vec<String> = match rng.below(16) {
        13 => {
            let cpu = format!("0.{}", rng.below(100));
            return vec![
                "RL.LOAD.REPORT".into(),
                key.into(),
                "i1".into(),
                "60000".into(),
                "cpu".into(),
                cpu,
            ];
        }
        14 => return vec!["RL.LOAD.STATUS".into(), key.into()],
        15 => {
            let priority = rng.pick(&["critical_plus", "sheddable", "2"]).to_string();
            return vec![
                "RL.ALL".into(),
                "2".into(),
                key.into(),
                other.into(),
                "LOAD".into(),
                priority,
                "THROTTLE".into(),
                limit,
                "10".into(),
                window,
            ];
        }
        0 | 1 => vec![
            "CL.THROTTLE".into(),
            key.into(),
            limit.clone(),
            "10".into(),
            window,
        ],
        2 | 3 => {
            let mut words = vec!["RL.WINDOW".into(), key.into(), limit, window];
            words.extend(algorithm.split_whitespace().map(str::to_owned));
            words
        }
        4 | 5 => vec!["RL.LOG".into(), key.into(), limit, window],
        6 => vec!["RL.ACQUIRE".into(), key.into(), limit, window],
        7 => vec!["RL.RELEASE".into(), key.into(), edge(rng, 0).to_string()],
        8 => vec![
            "RL.RENEW".into(),
            key.into(),
            edge(rng, 0).to_string(),
            window,
        ],
        9 => vec!["RL.WINDOW.COUNTS".into(), key.into(), window],
        10 => vec!["RL.LOG.COUNTS".into(), key.into(), window],
        _ => {
            let kinds = [
                format!("THROTTLE {limit} 10 {window}"),
                format!("WINDOW {limit} {window} {algorithm}"),
                format!("LOG {limit} {window}"),
                format!("LEASE {limit} {window}"),
            ];
            let (a, b) = (rng.pick(&kinds).clone(), rng.pick(&kinds).clone());
            let mut words = vec!["RL.ALL".into(), "2".into(), key.into(), other.into()];
            words.extend(a.split_whitespace().map(str::to_owned));
            words.extend(b.split_whitespace().map(str::to_owned));
            words
        }
    };
    let takes_options = !matches!(
        words[0].as_str(),
        "RL.RELEASE" | "RL.RENEW" | "RL.WINDOW.COUNTS" | "RL.LOG.COUNTS" | "RL.ACQUIRE"
    );
    if takes_options {
        if rng.chance(50) {
            words.push(rng.pick(&["0", "1", "2", "7", "1000"]).to_string());
        }
        match rng.below(8) {
            0 => words.extend(["BLOCK".into(), "5".into()]),
            1 => words.extend(["DELAY".into(), "1000".into()]),
            2 => words.push("AT_MOST".into()),
            3 => words.push("FORCE".into()),
            4 => words.push("REFUND".into()),
            _ => {}
        }
        if rng.chance(30) && words[0] != "RL.ALL" {
            let name = format!("{}_RO", words[0]);
            if !words.contains(&"REFUND".to_owned()) {
                words[0] = name;
            }
        }
    }
    words
}

/// A random effect line on `key`, valid-looking: one of the internal commands with fields
/// drawn from the edges of their range.
fn effect(rng: &mut Rng, key: &str, now_us: i64) -> Vec<Vec<u8>> {
    // The draws first, the shape after: ten fields are more than any line takes.
    let shape = rng.below(9);
    let variant = rng.below(6);
    let drawn: Vec<String> = (0..10).map(|_| edge(rng, now_us).to_string()).collect();
    let mut drawn = drawn.into_iter();
    let mut e = || drawn.next().unwrap_or_default();
    let line: Vec<String> = match shape {
        0..=2 => {
            let change = match variant % 5 {
                0 => format!("TAKE,{}", e()),
                1 => format!("TAKE,{},{}", e(), e()),
                2 => format!("REFUND,{}", e()),
                3 => format!("BLOCK,{}", e()),
                _ => format!("FORCE,{}", e()),
            };
            let fields = format!("{},{},{},{change}", e(), e(), e());
            vec!["RL.LOG.APPLY".into(), key.into(), fields]
        }
        3..=5 => {
            let fields = match variant % 3 {
                0 => format!("ACQUIRE,{},{},{},{},{}", e(), e(), e(), e(), e()),
                1 => format!("RELEASE,{},{}", e(), e()),
                _ => format!("RENEW,{},{},{}", e(), e(), e()),
            };
            vec!["RL.LEASE.APPLY".into(), key.into(), fields]
        }
        6 => {
            let option = [",REFUND", ",FORCE", ",AT_MOST", "", ",BLOCK,5", ",DELAY,9"];
            let tail = option[variant];
            let fields = format!("{},{},{},{}{tail}", e(), e(), e(), e());
            vec!["RL.LOG.REPLAY".into(), key.into(), fields]
        }
        _ => Vec::new(), // A chunk, below: its bytes are not text.
    };
    if !line.is_empty() {
        return line.into_iter().map(String::into_bytes).collect();
    }
    let mut bytes = Vec::new();
    for _ in 0..rng.below(4) {
        let word = edge(rng, now_us) as u64;
        bytes.extend_from_slice(&word.to_le_bytes());
        if rng.chance(50) {
            bytes.extend_from_slice(&(edge(rng, now_us) as u64).to_le_bytes());
        }
    }
    if rng.chance(20) {
        bytes.truncate(bytes.len().saturating_sub(1 + rng.below(7)));
    }
    if rng.chance(50) {
        let mut line = vec![b"RL.LOG.LOADCHUNK".to_vec(), key.as_bytes().to_vec(), bytes];
        if rng.chance(50) {
            line.push(b"BLOCKED".to_vec());
            line.push(edge(rng, now_us).to_string().into_bytes());
        }
        line
    } else {
        vec![
            b"RL.LEASE.LOADCHUNK".to_vec(),
            key.as_bytes().to_vec(),
            edge(rng, now_us).to_string().into_bytes(),
            bytes,
        ]
    }
}

/// `bytes` mutated: a bit flipped, truncated, extended, a byte or a word set to an edge.
fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>, now_us: i64) {
    for _ in 0..1 + rng.below(3) {
        if bytes.is_empty() {
            bytes.push(0xF8);
        }
        match rng.below(7) {
            0 => {
                let at = rng.below(bytes.len());
                bytes[at] ^= 1 << rng.below(8);
            }
            1 => bytes.truncate(rng.below(bytes.len() + 1)),
            2 => bytes.extend((0..1 + rng.below(9)).map(|_| rng.next() as u8)),
            3 => widen(rng, bytes, now_us),
            4 | 5 => {
                let at = rng.below(bytes.len());
                let word = (edge(rng, now_us) as u64).to_le_bytes();
                let end = (at + 8).min(bytes.len());
                bytes[at..end].copy_from_slice(&word[..end - at]);
            }
            _ => {
                let at = rng.below(bytes.len());
                bytes[at] =
                    *rng.pick(&[0x00, 0xFF, 0xF6, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE]);
            }
        }
    }
}

/// A window state (`FIXED`, `SLIDING`, `ANCHORED`) whose counters are widened to 8 bytes
/// each and set to the edges of their range, its window's start kept: counts no command
/// wrote, in a layout it accepts.
fn widen(rng: &mut Rng, bytes: &mut Vec<u8>, now_us: i64) {
    let counters = match bytes.first() {
        Some(0xF9 | 0xFE) => 1,
        Some(0xFA) => 2,
        _ => return,
    };
    if bytes.len() < 8 {
        return;
    }
    bytes.truncate(8);
    bytes[7] |= 0xC0; // The counters' width: 8 bytes.
    for _ in 0..counters {
        let count = match rng.below(3) {
            0 => u64::MAX,
            1 => u64::MAX - rng.below(3) as u64,
            _ => edge(rng, now_us) as u64,
        };
        bytes.extend_from_slice(&count.to_le_bytes());
    }
}

/// A string state made from scratch: a tag and a length each stored type may have, with
/// random contents.
fn scratch_state(rng: &mut Rng, now_us: i64) -> Vec<u8> {
    let (tag, lengths): (u8, &[usize]) = *rng.pick(&[
        (0xF8, &[12, 27][..]),
        (0xFD, &[23, 38]),
        (0xF9, &[9, 10, 12, 16, 24]),
        (0xFA, &[10, 11, 12, 14, 16, 20, 24, 32]),
        (0xFE, &[9, 10, 12, 16, 24]),
        (0xFC, &[31, 34, 40, 60]),
        (0xF6, &[37, 39, 40, 42, 48, 68]),
        (0xFB, &[14, 20]),
        (0xFF, &[8, 20, 31]),
        (0xF7, &[38, 39, 60, 120]),
    ]);
    let len = *rng.pick(lengths);
    let mut bytes = vec![tag];
    while bytes.len() < len {
        bytes.extend_from_slice(&(edge(rng, now_us) as u64).to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// CRC-64/Jones, reflected, as `DUMP` payloads carry it.
fn crc64(bytes: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5; // 0xad93d23594c935a9, reflected.
    let mut crc = 0u64;
    for &byte in bytes {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// A field a module's value writes to the RDB.
#[derive(Clone, Debug)]
enum Field {
    Unsigned(u64),
    Bytes(Vec<u8>),
}

/// An RDB length: `(value, bytes read)`.
fn read_length(bytes: &[u8]) -> Option<(u64, usize)> {
    let first = *bytes.first()?;
    match first >> 6 {
        0 => Some((u64::from(first & 0x3F), 1)),
        1 => Some((
            (u64::from(first & 0x3F) << 8) | u64::from(*bytes.get(1)?),
            2,
        )),
        _ if first == 0x80 => Some((
            u64::from(u32::from_be_bytes(bytes.get(1..5)?.try_into().ok()?)),
            5,
        )),
        _ if first == 0x81 => Some((u64::from_be_bytes(bytes.get(1..9)?.try_into().ok()?), 9)),
        _ => None, // Special encodings: not what this module writes.
    }
}

fn write_length(value: u64, out: &mut Vec<u8>) {
    if value < 1 << 6 {
        out.push(value as u8);
    } else if value < 1 << 14 {
        out.extend_from_slice(&[0x40 | (value >> 8) as u8, value as u8]);
    } else if value <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(value as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// A native value's `DUMP` payload: the type byte and module id, its fields, the RDB
/// version. `None` for a payload of another shape.
fn parse_dump(payload: &[u8]) -> Option<(Vec<u8>, Vec<Field>, [u8; 2])> {
    let body = &payload[..payload.len().checked_sub(10)?];
    let version: [u8; 2] = payload[body.len()..body.len() + 2].try_into().ok()?;
    // The type (module, version 2) and the module id (a 64-bit length).
    let (_, id_len) = read_length(body.get(1..)?)?;
    let header = body[..1 + id_len].to_vec();
    let mut at = header.len();
    let mut fields = Vec::new();
    loop {
        let (opcode, len) = read_length(&body[at..])?;
        at += len;
        match opcode {
            0 => break, // EOF
            2 => {
                let (value, len) = read_length(&body[at..])?;
                at += len;
                fields.push(Field::Unsigned(value));
            }
            5 => {
                let (len_value, len) = read_length(&body[at..])?;
                at += len;
                let end = at.checked_add(len_value as usize)?;
                fields.push(Field::Bytes(body.get(at..end)?.to_vec()));
                at = end;
            }
            _ => return None,
        }
    }
    (at == body.len()).then_some((header, fields, version))
}

fn build_dump(header: &[u8], fields: &[Field], version: [u8; 2]) -> Vec<u8> {
    let mut payload = header.to_vec();
    for field in fields {
        match field {
            Field::Unsigned(value) => {
                payload.push(2);
                write_length(*value, &mut payload);
            }
            Field::Bytes(bytes) => {
                payload.push(5);
                write_length(bytes.len() as u64, &mut payload);
                payload.extend_from_slice(bytes);
            }
        }
    }
    payload.push(0);
    payload.extend_from_slice(&version);
    let crc = crc64(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    payload
}

/// What `key` holds, to compare before and after a refusal: its dump and its time to live
/// in milliseconds (as `PTTL` says: -2 for no key), read in one transaction, so that a key
/// expiring between the two reads (a slow server's, under valgrind) is read as one state.
fn snapshot(con: &mut Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    redis::pipe()
        .atomic()
        .cmd("DUMP")
        .arg(key)
        .cmd("PTTL")
        .arg(key)
        .query(con)
        .unwrap()
}

/// Whether `after` is what `before` became without a write: the same value and expiry, the
/// time to live read again up to 2 s later (the server's own expiry may take a key whose time
/// was shorter).
fn unchanged(before: &(Option<Vec<u8>>, i64), after: &(Option<Vec<u8>>, i64)) -> bool {
    let expired = after.1 == -2 && (0..=2_000).contains(&before.1);
    expired || (after.0 == before.0 && (before.1 - after.1).abs() <= 2_000)
}

fn send(con: &mut Connection, words: &[Vec<u8>]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(std::str::from_utf8(&words[0]).unwrap());
    for word in &words[1..] {
        cmd.arg(&word[..]);
    }
    cmd.query(con)
}

fn describe(words: &[Vec<u8>]) -> String {
    words
        .iter()
        .map(|word| String::from_utf8_lossy(word).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sends `words`, naming `keys`: an answer, or an error that is not internal and after
/// which every key holds what it held.
fn check(con: &mut Connection, words: &[Vec<u8>], keys: &[&str], seed: u64) -> bool {
    let before: Vec<_> = keys.iter().map(|key| snapshot(con, key)).collect();
    match send(con, words) {
        Ok(_) => true,
        Err(error) => {
            let text = format!("{error}");
            let detail = error.detail().unwrap_or_default();
            assert!(
                !text.contains("internal error") && !detail.contains("internal error"),
                "seed {seed}: {} answered {text}",
                describe(words)
            );
            assert!(
                error
                    .code()
                    .is_some_and(|code| code == "ERR" || code == "WRONGTYPE"),
                "seed {seed}: {} answered {text}, neither ERR nor WRONGTYPE",
                describe(words)
            );
            for (key, before) in keys.iter().zip(before) {
                let after = snapshot(con, key);
                assert!(
                    unchanged(&before, &after),
                    "seed {seed}: {} refused ({text}) but changed {key}: {before:?} -> {after:?}",
                    describe(words)
                );
            }
            false
        }
    }
}

#[test]
fn forged_states_and_effects_get_answers_or_clear_errors_that_change_nothing() {
    let rounds = env_number("FORGED_ROUNDS", 20_000);
    let seed = env_number("FORGED_SEED", 0x5EED_F046) | 1;
    let server = Server::builder()
        .module_arg("debug-commands")
        .module_arg("top-keys")
        .module_arg("16")
        .arg("rdbcompression", "no")
        .start();
    let mut con = server.connect();
    let mut rng = Rng(seed);
    let now_us = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64
    };
    // Real states of every kind, and real native values' dumps, to start forgeries from.
    let mut strings: Vec<Vec<u8>> = Vec::new();
    let mut natives: Vec<Vec<u8>> = Vec::new();
    for (index, call) in real_calls("{fg}real").into_iter().enumerate() {
        for round in 0..3 {
            let _: Value = query(&mut con, &call);
            if round == 1 && call[0] != "RL.ACQUIRE" {
                // A refund too, where the call takes one (a refused one changes nothing).
                let mut refund: Vec<Vec<u8>> =
                    call.iter().map(|w| w.clone().into_bytes()).collect();
                refund.push(b"REFUND".to_vec());
                let _ = send(&mut con, &refund);
            }
        }
        if query::<String, _>(&mut con, &["TYPE", "{fg}real"]) == "string" {
            strings.push(query(&mut con, &["GET", "{fg}real"]));
        } else {
            natives.push(query(&mut con, &["DUMP", "{fg}real"]));
        }
        let _: i64 = query(&mut con, &["DEL", "{fg}real"]);
        assert!(index < 64);
    }
    // A service's load, with a policy and without.
    for policy in [false, true] {
        if policy {
            let set = [
                "RL.LOAD.POLICY",
                "{fg}real",
                "FACTOR",
                "backlog",
                "SUM",
                "LEVEL",
                "cpu",
                "0.5",
                "backlog",
                "10",
                "SHARES",
                "1",
                "1",
                "0.5",
                "0",
            ];
            let _: Value = query(&mut con, &set);
        }
        let report = [
            "RL.LOAD.REPORT",
            "{fg}real",
            "a",
            "60000",
            "cpu",
            "0.7",
            "inflight",
            "3",
        ];
        let _: Value = query(&mut con, &report);
        strings.push(query(&mut con, &["GET", "{fg}real"]));
        let _: i64 = query(&mut con, &["DEL", "{fg}real"]);
    }
    assert!(
        strings.len() >= 8 && natives.len() >= 2,
        "{strings:?} {natives:?}"
    );
    let (mut answered, mut refused) = (0u64, 0u64);
    let mut last = String::new();
    for _ in 0..rounds {
        let key = *rng.pick(&KEYS);
        let other = *rng.pick(&KEYS);
        let now = now_us();
        match rng.below(20) {
            // The key emptied, for real states to build up from the commands.
            0 => {
                let _: i64 = query(&mut con, &["DEL", key]);
            }
            // A forged string state, from a real one or from scratch.
            1..=4 => {
                let mut bytes = if rng.chance(70) {
                    rng.pick(&strings).clone()
                } else {
                    scratch_state(&mut rng, now)
                };
                mutate(&mut rng, &mut bytes, now);
                let ttl = (60_000 + rng.below(600_000)).to_string();
                let mut set = redis::cmd("SET");
                set.arg(key).arg(&bytes[..]).arg("PX").arg(&ttl);
                let _: () = set.query(&mut con).unwrap();
            }
            // A forged native value, restored from a real dump whose fields changed.
            5 | 6 => {
                let dump = rng.pick(&natives).clone();
                let Some((header, mut fields, version)) = parse_dump(&dump) else {
                    panic!("a dump of an unexpected shape: {dump:?}");
                };
                for _ in 0..1 + rng.below(3) {
                    let at = rng.below(fields.len());
                    match &mut fields[at] {
                        Field::Unsigned(value) => *value = edge(&mut rng, now) as u64,
                        Field::Bytes(bytes) => mutate(&mut rng, bytes, now),
                    }
                }
                let mut payload = build_dump(&header, &fields, version);
                if rng.chance(10) {
                    // A read past the end: a string's length, or the payload, cut short
                    // under a checksum made again, so that loading meets an I/O error.
                    let cut = rng.below(payload.len() - 10);
                    payload.truncate(cut);
                    payload.extend_from_slice(&version);
                    let crc = crc64(&payload);
                    payload.extend_from_slice(&crc.to_le_bytes());
                }
                let ttl = (60_000 + rng.below(600_000)).to_string();
                let restore = [
                    b"RESTORE".to_vec(),
                    key.as_bytes().to_vec(),
                    ttl.into_bytes(),
                    payload,
                    b"REPLACE".to_vec(),
                ];
                // A value the type refuses to load is refused whole: nothing is stored.
                let _ = send(&mut con, &restore);
            }
            // A random effect line.
            7..=10 => {
                let line = effect(&mut rng, key, now);
                if check(&mut con, &line, &[key], seed) {
                    answered += 1;
                } else {
                    refused += 1;
                }
                last = describe(&line);
                // An AOF rewrite's chunks rebuild a value whose expiry follows as the AOF's
                // own PEXPIREAT: as the AOF does.
                if line[0].ends_with(b"LOADCHUNK") {
                    let _: i64 = query(&mut con, &["PEXPIRE", key, "600000"]);
                }
            }
            // A command.
            _ => {
                let words: Vec<Vec<u8>> = command(&mut rng, key, other)
                    .into_iter()
                    .map(String::into_bytes)
                    .collect();
                let keys: &[&str] = if words[0] == b"RL.ALL" {
                    &[key, other]
                } else {
                    &[key]
                };
                if check(&mut con, &words, keys, seed) {
                    answered += 1;
                } else {
                    refused += 1;
                }
                last = describe(&words);
            }
        }
        // Every key the module wrote keeps an expiry.
        let ttl: i64 = query(&mut con, &["PTTL", key]);
        // A service's load holding a policy is configuration, kept without one.
        let policy = |con: &mut Connection| {
            let value: Option<Vec<u8>> = query(con, &["GET", key]);
            value.is_some_and(|value| value.len() > 3 && value[0] == 0xF7 && value[3] == 1)
        };
        assert!(
            ttl != -1 || policy(&mut con),
            "seed {seed}: {key} left without an expiry by {last}"
        );
    }
    assert_eq!(query::<String, _>(&mut con, &["PING"]), "PONG");
    assert!(
        !server.log().contains("ratelimit module panic"),
        "seed {seed}: a panic was caught:\n{}",
        server.log()
    );
    eprintln!("{rounds} rounds: {answered} answered, {refused} refused with a clear error");
    assert!(answered > 0 && refused > 0);
}
