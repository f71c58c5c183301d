//! Calling the module from Rust with the crate under `clients/rust`: typed limiters, one
//! call per decision, and the typed result every command answers.
//!
//! ```sh
//! cargo run --release --manifest-path examples/rust/Cargo.toml   # REDIS_URL: redis://127.0.0.1:6379
//! ```

use std::time::Duration;

use ratelimit_module::{redis, seconds, Config, Limiter, Options, RateLimit, RateLimiter};

const MINUTE: Duration = Duration::from_secs(60);

fn describe(result: &RateLimit, with_times: bool) -> String {
    match (result.allowed, with_times) {
        (false, true) => format!(
            "limited: retry in {} s",
            result.retry_after.map_or(-1, |after| seconds(after) as i64)
        ),
        (false, false) => "limited".to_owned(),
        (true, false) => format!("allowed: {} of {} left", result.remaining, result.limit),
        (true, true) => format!(
            "allowed: {} of {} left, full again in {} s",
            result.remaining,
            result.limit,
            seconds(result.reset_after)
        ),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let connection = redis::Client::open(url)?.get_connection()?;
    let limiter = RateLimiter::new(connection, Config::default())?;
    let user = format!("example:{}", std::process::id()); // a fresh limiter on every run
    let three_times =
        |limiters: &[Limiter], with_times: bool| -> Result<(), Box<dyn std::error::Error>> {
            for _ in 0..3 {
                let result = limiter.check(limiters, Options::new())?;
                println!("  {}", describe(&result, with_times));
            }
            Ok(())
        };
    println!("CL.THROTTLE: bursts of 2, then 1 per minute");
    three_times(
        &[Limiter::throttle(format!("{user}:throttle"), 1, 1, MINUTE)],
        true,
    )?;
    println!("RL.LOG: exactly 2 per minute");
    three_times(&[Limiter::log(format!("{user}:log"), 2, MINUTE)], true)?;
    // A window's times depend on where its boundaries fall, so they are left out here.
    println!("RL.WINDOW: 2 per minute, sliding");
    three_times(
        &[Limiter::window(format!("{user}:window"), 2, MINUTE)],
        false,
    )?;
    println!("RL.ALL: 2 per minute and 3 per hour, together");
    let together = [
        Limiter::log(format!("{user}:minute"), 2, MINUTE),
        Limiter::log(format!("{user}:hour"), 3, 60 * MINUTE),
    ];
    three_times(&together, true)?;
    println!("RL.ACQUIRE: 1 worker at a time");
    let workers = format!("{user}:workers");
    let first = limiter.acquire_lease(&workers, 1, 30 * Duration::from_secs(1), 1)?;
    let second = limiter.acquire_lease(&workers, 1, 30 * Duration::from_secs(1), 1)?;
    let verdict = |granted: bool| if granted { "got a lease" } else { "refused" };
    println!("  first: {}", verdict(first.allowed()));
    println!("  second: {}", verdict(second.allowed()));
    let released = limiter.release_lease(&workers, first.id)?;
    println!("  released: {}", if released { "True" } else { "False" });
    Ok(())
}
