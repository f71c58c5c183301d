//! Calling the module's commands from Rust with the `redis` crate, reading the five-integer
//! reply into a typed result.
//!
//! ```sh
//! cargo run --release --example rate_limit     # REDIS_URL defaults to redis://127.0.0.1:6379
//! ```

use redis::{Connection, FromRedisValue, RedisResult, ToRedisArgs, Value};

/// What every limiter command answers: the same five integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RateLimit {
    /// Refused, and not counted.
    limited: bool,
    /// The most admitted at once.
    limit: i64,
    /// How much more would be admitted right now.
    remaining: i64,
    /// When a refused request may retry; `None` when admitted, or when it never can be.
    retry_after: Option<i64>,
    /// When the limiter is back to full capacity.
    reset_after: i64,
}

impl FromRedisValue for RateLimit {
    fn from_redis_value(value: Value) -> Result<Self, redis::ParsingError> {
        let [limited, limit, remaining, retry_after, reset_after]: [i64; 5] =
            FromRedisValue::from_redis_value(value)?;
        Ok(RateLimit {
            limited: limited == 1,
            limit,
            remaining,
            retry_after: (retry_after >= 0).then_some(retry_after),
            reset_after,
        })
    }
}

/// Runs one of the module's commands and reads its reply.
fn call(con: &mut Connection, command: &str, args: impl ToRedisArgs) -> RedisResult<RateLimit> {
    redis::cmd(command).arg(args).query(con)
}

/// GCRA: `count` per `period` seconds, bursts of `max_burst + 1`.
fn throttle(
    con: &mut Connection,
    key: &str,
    max_burst: i64,
    count: i64,
    period: i64,
) -> RedisResult<RateLimit> {
    call(con, "CL.THROTTLE", (key, max_burst, count, period))
}

/// A sliding-window counter: `limit` per `seconds` (add `FIXED` or `BUCKETS n` for the others).
fn window(con: &mut Connection, key: &str, limit: i64, seconds: i64) -> RedisResult<RateLimit> {
    call(con, "RL.WINDOW", (key, limit, seconds, "SLIDING"))
}

/// An exact sliding log: at most `limit` in any `seconds`.
fn log(con: &mut Connection, key: &str, limit: i64, seconds: i64) -> RedisResult<RateLimit> {
    call(con, "RL.LOG", (key, limit, seconds))
}

/// Two exact logs, all or nothing: `per_minute` in any minute and `per_hour` in any hour.
fn minute_and_hour(
    con: &mut Connection,
    keys: [&str; 2],
    per_minute: i64,
    per_hour: i64,
) -> RedisResult<RateLimit> {
    let limiters = ("LOG", per_minute, 60, "LOG", per_hour, 3600);
    call(con, "RL.ALL", (2, keys[0], keys[1], limiters))
}

/// A lease of one of `limit` slots for `seconds`: its id, 0 when refused.
fn acquire(con: &mut Connection, key: &str, limit: i64, seconds: i64) -> RedisResult<i64> {
    let reply: Vec<i64> = redis::cmd("RL.ACQUIRE")
        .arg((key, limit, seconds))
        .query(con)?;
    Ok(reply[5])
}

fn describe(result: RateLimit, with_times: bool) -> String {
    match (result.limited, with_times) {
        (true, true) => format!("limited: retry in {} s", result.retry_after.unwrap_or(-1)),
        (true, false) => "limited".to_owned(),
        (false, with_times) => {
            let text = format!("allowed: {} of {} left", result.remaining, result.limit);
            if with_times {
                format!("{text}, full again in {} s", result.reset_after)
            } else {
                text
            }
        }
    }
}

fn main() -> RedisResult<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let mut con = redis::Client::open(url)?.get_connection()?;
    let user = format!("example:{}", std::process::id()); // a fresh limiter on every run
    println!("CL.THROTTLE: bursts of 2, then 1 per minute");
    for _ in 0..3 {
        println!(
            "  {}",
            describe(
                throttle(&mut con, &format!("{user}:throttle"), 1, 1, 60)?,
                true
            )
        );
    }
    println!("RL.LOG: exactly 2 per minute");
    for _ in 0..3 {
        println!(
            "  {}",
            describe(log(&mut con, &format!("{user}:log"), 2, 60)?, true)
        );
    }
    // A window's times depend on where its boundaries fall, so they are left out here.
    println!("RL.WINDOW: 2 per minute, sliding");
    for _ in 0..3 {
        println!(
            "  {}",
            describe(window(&mut con, &format!("{user}:window"), 2, 60)?, false)
        );
    }
    println!("RL.ALL: 2 per minute and 3 per hour, together");
    let keys = [format!("{user}:minute"), format!("{user}:hour")];
    for _ in 0..3 {
        let result = minute_and_hour(&mut con, [&keys[0], &keys[1]], 2, 3)?;
        println!("  {}", describe(result, true));
    }
    println!("RL.ACQUIRE: 1 worker at a time");
    let workers = format!("{user}:workers");
    let first = acquire(&mut con, &workers, 1, 30)?;
    let second = acquire(&mut con, &workers, 1, 30)?;
    let verdict = |id: i64| if id > 0 { "got a lease" } else { "refused" };
    println!("  first: {}", verdict(first));
    println!("  second: {}", verdict(second));
    let released: i64 = redis::cmd("RL.RELEASE")
        .arg((&workers, first))
        .query(&mut con)?;
    println!(
        "  released: {}",
        if released == 1 { "True" } else { "False" }
    );
    Ok(())
}
