//! Argument fuzzing against a live server: random invocations of every command (random
//! arity; integers at the edges of i64 and u64, floats, exponents, hex, signs, spaces,
//! empty strings, non-UTF-8 and NUL bytes; keywords in any case and out of place; keys of
//! every type, empty and very long). The server stays up, every reply is an error or a
//! well-formed five-integer reply, no call hits the module's panic guard, keys of other
//! types are left exactly as they were, and no key is left without a TTL.
//!
//! `FUZZ_INVOCATIONS` (default 100,000) and `FUZZ_SEED` change the run; `make stress` runs
//! it longer.

mod support;

use redis::{Connection, Value};
use support::{keyspace, query, Server};

/// A small, seedable generator (xorshift64*): the same seed, the same invocations.
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

/// Keys of every other type, created before the run with a TTL, and what each holds. (A
/// string of exactly 19 digits would be a state redis-cell left, which `CL.THROTTLE` reads
/// and rewrites by design; 20 digits are not.)
const FOREIGN_KEYS: [(&str, &[&str]); 9] = [
    ("fz:string", &["SET", "fz:string", "hello"]),
    ("fz:int", &["SET", "fz:int", "12345"]),
    (
        "fz:digits20",
        &["SET", "fz:digits20", "17000000000000000000"],
    ),
    ("fz:list", &["RPUSH", "fz:list", "a", "b"]),
    ("fz:hash", &["HSET", "fz:hash", "f", "v"]),
    ("fz:set", &["SADD", "fz:set", "m"]),
    ("fz:zset", &["ZADD", "fz:zset", "1", "m"]),
    ("fz:stream", &["XADD", "fz:stream", "*", "f", "v"]),
    ("fz:json-like", &["SET", "fz:json-like", "{\"limit\":5}"]),
];

/// Integers and not-quite-integers.
const NUMBERS: &[&[u8]] = &[
    b"0",
    b"1",
    b"-1",
    b"2",
    b"5",
    b"60",
    b"1000",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551615",
    b"18446744073709551616",
    b"99999999999999999999999999999999999999",
    b"4611686018427387904",
    b"1.5",
    b"1e3",
    b"1E3",
    b"0x10",
    b"+5",
    b"-0",
    b"007",
    b" 5",
    b"5 ",
    b"",
    b"\0",
    b"5\0",
    b"\xff\xfe",
    b"\xd9\xa1\xd9\xa2",
    b"inf",
    b"-inf",
    b"nan",
    b"--5",
    b"+-5",
    b"1_000",
];

/// Keywords, some misspelled or of another command.
const WORDS: &[&str] = &[
    "S",
    "MS",
    "US",
    "FIXED",
    "SLIDING",
    "BUCKETS",
    "NS",
    "SLIDNG",
    "FIX",
    "bucket",
    "WINDOW",
    "LIMIT",
    "KEEPTTL",
    "PX",
    "REFUND",
    "BLOCK",
    "DETAILS",
    "THROTTLE",
    "LOG",
    "REFUNDS",
    "DELAY",
    "AT_MOST",
    "FORCE",
    "WARMUP",
    "AT_LEAST",
    "FORCED",
    "LOAD",
    "LEVEL",
    "SHARES",
    "DEFAULT",
    "critical",
    "sheddable",
    "cpu",
    "HOLD",
];

/// One argument: a number, a keyword in a random case, or random bytes.
fn argument(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0..=3 => (rng.below(2_000) as i64 - 100).to_string().into_bytes(),
        4 => rng.next().to_string().into_bytes(),
        5 => (rng.next() as i64).to_string().into_bytes(),
        6 | 7 => rng.pick(NUMBERS).to_vec(),
        8 => {
            let word = rng.pick(WORDS);
            word.chars()
                .map(|c| {
                    if rng.chance(50) {
                        c.to_ascii_lowercase()
                    } else {
                        c
                    }
                })
                .collect::<String>()
                .into_bytes()
        }
        _ => (0..rng.below(12)).map(|_| rng.next() as u8).collect(),
    }
}

/// A key: mostly a few shared limiter keys (so states build up and other commands meet
/// them), sometimes a key of another type, empty, binary or very long.
fn key(rng: &mut Rng, long_key: &[u8]) -> Vec<u8> {
    match rng.below(100) {
        0..=69 => format!("fz:limiter:{}", rng.below(40)).into_bytes(),
        70..=84 => rng.pick(&FOREIGN_KEYS).0.as_bytes().to_vec(),
        85..=89 => b"fz:bin:\x00\xff\xfe".to_vec(),
        90..=94 => Vec::new(),
        95..=97 => long_key.to_vec(),
        _ => (0..rng.below(30)).map(|_| rng.next() as u8).collect(),
    }
}

/// A random invocation of one of the commands: half of them well-formed (in range, with
/// keywords in place, in any case), some of those with one argument replaced by a random
/// one; the other half random arguments of random arity.
fn invocation(rng: &mut Rng, long_key: &[u8]) -> Vec<Vec<u8>> {
    if rng.chance(50) {
        let mut command = well_formed(rng, long_key);
        if rng.chance(30) {
            let position = 1 + rng.below(command.len() - 1);
            command[position] = argument(rng);
        }
        return command;
    }
    let name = *rng.pick(&[
        "CL.THROTTLE",
        "cl.throttle_ro",
        "RL.WINDOW",
        "rl.window_ro",
        "RL.LOG",
        "Rl.Log_Ro",
        "RL.ALL",
        "rl.all_ro",
        "RL.ACQUIRE",
        "rl.acquire_ro",
        "RL.RELEASE",
        "rl.renew",
        "RL.LOG.REPLAY",
        "RL.LOG.LOADCHUNK",
        "RL.LEASE.APPLY",
        "RL.LEASE.LOADCHUNK",
        "RL.LOAD.REPORT",
        "rl.load.policy",
        "RL.LOAD.STATUS",
    ]);
    let mut command = vec![name.as_bytes().to_vec()];
    let arity = match rng.below(10) {
        0 => 0,
        1 => rng.below(20),
        _ => 3 + rng.below(5),
    };
    if arity > 0 {
        command.push(key(rng, long_key));
    }
    for _ in 1..arity {
        command.push(argument(rng));
    }
    command
}

/// A valid call of one of the commands, writing or read-only.
fn well_formed(rng: &mut Rng, long_key: &[u8]) -> Vec<Vec<u8>> {
    if rng.chance(15) {
        return well_formed_lease(rng, long_key);
    }
    let mut command = if rng.chance(25) {
        well_formed_all(rng, long_key)
    } else {
        well_formed_single(rng, long_key)
    };
    // Options every command takes: a block, or a refund of a writing command.
    match rng.below(10) {
        0 => command.extend([
            b"BLOCK".to_vec(),
            (1 + rng.below(100)).to_string().into_bytes(),
        ]),
        1 if !command[0].ends_with(b"_RO") => command.push(b"refund".to_vec()),
        // What a take that does not fit does instead of being refused.
        2 => command.extend([b"DELAY".to_vec(), rng.below(200).to_string().into_bytes()]),
        3 => command.push(b"at_most".to_vec()),
        4 if command[0].starts_with(b"CL.THROTTLE") => command.extend([
            b"WARMUP".to_vec(),
            (1 + rng.below(100)).to_string().into_bytes(),
        ]),
        5 => command.push(b"Force".to_vec()),
        _ => {}
    }
    if rng.chance(20) {
        let name = String::from_utf8(command[0].clone()).unwrap();
        command[0] = format!("{name}_RO").into_bytes();
    }
    command
}

/// A valid call of RL.ACQUIRE, RL.RELEASE or RL.RENEW on a few lease keys; ids are small
/// numbers or times, mostly unknown, sometimes ones that were given.
fn well_formed_lease(rng: &mut Rng, long_key: &[u8]) -> Vec<Vec<u8>> {
    let number =
        |rng: &mut Rng, low: usize, high: usize| (low + rng.below(high - low + 1)).to_string();
    let key = if rng.chance(90) {
        format!("fz:lease:{}", rng.below(10)).into_bytes()
    } else {
        key(rng, long_key)
    };
    let mut words: Vec<String> = match rng.below(4) {
        0 | 1 => {
            let mut words = vec![
                rng.pick(&["RL.ACQUIRE", "rl.acquire_ro"]).to_string(),
                number(rng, 1, 20),
                number(rng, 1, 5000),
            ];
            if rng.chance(60) {
                words.push(number(rng, 0, 25));
            }
            if rng.chance(50) {
                words.push(rng.pick(&["MS", "us", "S"]).to_string());
            }
            words
        }
        2 => vec![
            "RL.RELEASE".to_owned(),
            number(rng, 1, 2_000_000_000_000_000),
        ],
        _ => {
            let mut words = vec![
                "RL.RENEW".to_owned(),
                number(rng, 1, 2_000_000_000_000_000),
                number(rng, 1, 5000),
            ];
            if rng.chance(50) {
                words.push("MS".to_owned());
            }
            words
        }
    };
    let name = words.remove(0);
    let mut command = vec![name.into_bytes(), key];
    command.extend(words.into_iter().map(String::into_bytes));
    command
}

/// A valid `RL.ALL` over 1 to 4 limiters, on keys of a tag, so that states build up.
fn well_formed_all(rng: &mut Rng, long_key: &[u8]) -> Vec<Vec<u8>> {
    let number =
        |rng: &mut Rng, low: usize, high: usize| (low + rng.below(high - low + 1)).to_string();
    let keys = 1 + rng.below(4);
    let mut words = vec!["RL.ALL".to_owned(), keys.to_string()];
    let mut limiters = Vec::new();
    for i in 0..keys {
        let kind = rng.below(3);
        words.push(format!("fz:{{all}}:{kind}:{i}:{}", rng.below(5)));
        match kind {
            0 => limiters.extend([
                "THROTTLE".to_owned(),
                number(rng, 0, 20),
                number(rng, 1, 100),
                number(rng, 1, 100),
            ]),
            1 => {
                limiters.extend(["window".to_owned(), number(rng, 1, 50), number(rng, 1, 100)]);
                match rng.below(4) {
                    0 => limiters.push("FIXED".to_owned()),
                    1 => limiters.extend(["BUCKETS".to_owned(), number(rng, 1, 30)]),
                    _ => {}
                }
            }
            _ => limiters.extend(["Log".to_owned(), number(rng, 1, 50), number(rng, 1, 100)]),
        }
    }
    words.extend(limiters);
    if rng.chance(70) {
        words.push(number(rng, 0, 30));
    }
    if rng.chance(30) {
        words.push(rng.pick(&["s", "MS", "Us"]).to_string());
    }
    if rng.chance(30) {
        words.push("DETAILS".to_owned());
    }
    let mut command: Vec<Vec<u8>> = words.into_iter().map(String::into_bytes).collect();
    if rng.chance(5) {
        command[2] = key(rng, long_key);
    }
    command
}

/// A valid call of one of the single-key commands.
fn well_formed_single(rng: &mut Rng, long_key: &[u8]) -> Vec<Vec<u8>> {
    let number =
        |rng: &mut Rng, low: usize, high: usize| (low + rng.below(high - low + 1)).to_string();
    let mut words: Vec<String> = match rng.below(3) {
        0 => vec![
            "CL.THROTTLE".into(),
            number(rng, 0, 20),
            number(rng, 1, 100),
            number(rng, 1, 100),
        ],
        1 => vec!["RL.WINDOW".into(), number(rng, 1, 50), number(rng, 1, 100)],
        _ => vec!["RL.LOG".into(), number(rng, 1, 50), number(rng, 1, 100)],
    };
    if rng.chance(70) {
        words.push(number(rng, 0, 30));
    }
    if words[0] == "RL.WINDOW" && rng.chance(70) {
        match rng.below(3) {
            0 => words.push("fixed".into()),
            1 => words.push("Sliding".into()),
            _ => words.extend(["BUCKETS".into(), number(rng, 1, 60)]),
        }
    }
    if rng.chance(50) {
        words.push(rng.pick(&["s", "MS", "Us"]).to_string());
    }
    // Mostly a key of this command and algorithm, so that states build up; sometimes any.
    let key = if rng.chance(80) {
        let algorithm = words
            .iter()
            .find(|word| word.chars().all(char::is_alphabetic) && word.len() > 2);
        format!(
            "fz:{}:{}:{}",
            words[0],
            algorithm.map_or("", String::as_str),
            rng.below(20)
        )
        .into_bytes()
    } else {
        key(rng, long_key)
    };
    let mut command: Vec<Vec<u8>> = words.into_iter().map(String::into_bytes).collect();
    command.insert(1, key);
    command
}

/// Checks one reply: a well-formed five-integer reply (followed, for `RL.ALL ... DETAILS`,
/// by one per limiter) or an `ERR`/`WRONGTYPE`/`CROSSSLOT`-free error, never the panic
/// guard's.
fn check_reply(command: &[Vec<u8>], reply: &Value, seed: u64) {
    let shown = || {
        let args: Vec<String> = command
            .iter()
            .map(|arg| String::from_utf8_lossy(&arg[..arg.len().min(40)]).into_owned())
            .collect();
        format!("{args:?} (FUZZ_SEED={seed})")
    };
    // The load commands: OK, their arrays of integers and decimal strings, or an error.
    if command[0].to_ascii_uppercase().starts_with(b"RL.LOAD.") {
        match reply {
            Value::Okay | Value::SimpleString(_) | Value::Array(_) => return,
            Value::ServerError(_) => {}
            other => panic!("{}: unexpected reply {other:?}", shown()),
        }
    }
    match reply {
        // RL.RELEASE and RL.RENEW: whether the lease was held.
        Value::Int(held) => assert!(*held == 0 || *held == 1, "{}: {held}", shown()),
        // A sixth integer: RL.ACQUIRE's lease id (0 when none was given), DELAY's wait,
        // AT_MOST's quantity granted; each limiter's own reply may follow (DETAILS).
        Value::Array(items) if items.len() >= 6 && matches!(items[5], Value::Int(_)) => {
            let Value::Int(sixth) = items[5] else {
                unreachable!()
            };
            let refused = matches!(items[0], Value::Int(1));
            // A refusal gives no id, no wait and no quantity.
            assert!(
                sixth >= 0 && !(refused && sixth > 0),
                "{}: {items:?}",
                shown()
            );
            let mut rest = items[..5].to_vec();
            rest.extend_from_slice(&items[6..]);
            check_reply(command, &Value::Array(rest), seed);
        }
        Value::Array(items) => {
            let (items, details) = items.split_at(items.len().min(5));
            for detail in details {
                check_reply(command, detail, seed);
            }
            let fields: Vec<i64> = items
                .iter()
                .map(|item| match item {
                    Value::Int(value) => *value,
                    other => panic!("{}: not an integer: {other:?}", shown()),
                })
                .collect();
            let [limited, limit, remaining, retry_after, reset_after] = fields[..] else {
                panic!("{}: {fields:?}", shown());
            };
            assert!(limited == 0 || limited == 1, "{}: {fields:?}", shown());
            assert!(limit >= 1, "{}: {fields:?}", shown());
            assert!((0..=limit).contains(&remaining), "{}: {fields:?}", shown());
            assert!(
                retry_after >= -1 && reset_after >= 0,
                "{}: {fields:?}",
                shown()
            );
        }
        Value::ServerError(error) => {
            let code = error.code();
            assert!(
                code == "ERR" || code == "WRONGTYPE",
                "{}: {error:?}",
                shown()
            );
            let detail = error.details().unwrap_or_default();
            assert!(
                !detail.contains("internal error"),
                "{}: the panic guard answered: {detail}",
                shown()
            );
        }
        other => panic!("{}: unexpected reply {other:?}", shown()),
    }
}

fn dumps(con: &mut Connection) -> Vec<(Option<Vec<u8>>, i64)> {
    FOREIGN_KEYS
        .iter()
        .map(|(key, _)| {
            let dump: Option<Vec<u8>> = query(con, &["DUMP", key]);
            let expire_at: i64 = query(con, &["PEXPIRETIME", key]);
            (dump, expire_at)
        })
        .collect()
}

#[test]
fn random_invocations_never_crash_or_leave_a_key_without_ttl() {
    let seed = env_number("FUZZ_SEED", 0x005e_ed0f_f022);
    let invocations = env_number("FUZZ_INVOCATIONS", 100_000) as usize;
    let server = Server::start();
    let mut con = server.connect();
    for (key, create) in FOREIGN_KEYS {
        let _: Value = query(&mut con, create);
        let _: i64 = query(&mut con, &["EXPIRE", key, "3600"]);
    }
    let foreign_before = dumps(&mut con);
    let long_key = vec![b'k'; 64 * 1024];

    let mut rng = Rng(seed | 1);
    let mut done = 0;
    let mut well_formed = 0;
    while done < invocations {
        let batch: Vec<Vec<Vec<u8>>> = (0..1_000.min(invocations - done))
            .map(|_| invocation(&mut rng, &long_key))
            .collect();
        let mut pipe = redis::pipe();
        for command in &batch {
            pipe.add_command(support::command(command));
        }
        let replies: Vec<Value> = pipe
            .ignore_errors()
            .query(&mut con)
            .unwrap_or_else(|error| {
                panic!("the server stopped answering (FUZZ_SEED={seed}): {error}")
            });
        assert_eq!(replies.len(), batch.len());
        for (command, reply) in batch.iter().zip(&replies) {
            check_reply(command, reply, seed);
            well_formed += matches!(reply, Value::Array(_)) as usize;
        }
        done += batch.len();
    }
    // Enough of the invocations were valid to build up state.
    assert!(
        well_formed > invocations / 5,
        "{well_formed} replies of {invocations}"
    );

    let pong: String = query(&mut con, &["PING"]);
    assert_eq!(pong, "PONG");
    assert_eq!(
        dumps(&mut con),
        foreign_before,
        "a key of another type changed"
    );
    let (keys, expires) = keyspace(&mut con);
    assert!(
        keys > FOREIGN_KEYS.len() as u64,
        "no limiter key was written"
    );
    assert_eq!(keys, expires, "a key without a TTL (FUZZ_SEED={seed})");
    assert!(!server.log().contains("panic"), "{}", server.log());
}
