//! Decisions per second on one task, for `bench/quota.py` (BENCHMARKS.md): `governor` in
//! the process (no server: its limits hold in one process only), this crate's
//! `AsyncRateLimiter` with one server call per decision (batch 1), and `AsyncQuota` with
//! batches of 10, 50 and 100, on one key of a server with the module.
//!
//! With `--local-limit`, it prints instead what the local limit's check costs a request in
//! nanoseconds (`ConcurrencyLimit`'s admit and finish, no server), for `bench/overload.py`.
//!
//! ```sh
//! cargo run --release --example bench -- <port> [seconds]    # prints one JSON object
//! cargo run --release --example bench -- --local-limit       # prints one number
//! ```

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use ratelimit_module::{
    monotonic, Algorithm, AsyncQuota, AsyncRateLimiter, ConcurrencyLimit, Config, Limiter, Options,
    Priority,
};

fn row(name: &str, batch: u64, decisions: u64, calls: u64, seconds: f64) -> String {
    format!(
        "{{\"name\":\"{name}\",\"batch\":{batch},\"per_second\":{:.1},\"calls_per_decision\":{:.4}}}",
        decisions as f64 / seconds,
        calls as f64 / decisions.max(1) as f64
    )
}

/// Nanoseconds per admit and finish of the local limit, timed as the other packages' are:
/// a `sheddable` request every 100 µs taking 50 µs, after as many to warm up.
fn local_limit_cost() -> f64 {
    let mut limit = ConcurrencyLimit::default();
    let rounds: u64 = 2_000_000;
    let mut run = |from: u64| {
        for i in from..from + rounds {
            let now = Duration::from_micros(i * 100);
            std::hint::black_box(limit.admit(Priority::Sheddable, now));
            limit.finish(Duration::from_micros(50), now + Duration::from_micros(50));
        }
    };
    run(0);
    let started = Instant::now();
    run(rounds);
    started.elapsed().as_nanos() as f64 / rounds as f64
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("--local-limit") {
        println!("{:.1}", local_limit_cost());
        return Ok(());
    }
    let mut arguments = std::env::args().skip(1);
    let port: u16 = arguments.next().ok_or("the server's port")?.parse()?;
    let seconds: f64 = arguments.next().map_or(Ok(2.0), |s| s.parse())?;
    let span = Duration::from_secs_f64(seconds);
    let mut rows = Vec::new();

    // governor: one process's own limiter, no server (a limit far above the load).
    let governor = governor::RateLimiter::direct(governor::Quota::per_second(NonZeroU32::MAX));
    let (mut decisions, started) = (0u64, Instant::now());
    while started.elapsed() < span {
        for _ in 0..1000 {
            if governor.check().is_ok() {
                decisions += 1;
            }
        }
    }
    rows.push(row(
        "governor",
        0,
        decisions,
        0,
        started.elapsed().as_secs_f64(),
    ));

    let connection = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?
        .get_multiplexed_async_connection()
        .await?;
    let limiter = AsyncRateLimiter::shared(connection, Config::default())?;
    let limits = |batch: u64| {
        vec![Limiter::window(
            format!("bench:rust:{batch}"),
            1 << 40,
            Duration::from_secs(1),
        )
        .algorithm(Algorithm::Fixed)]
    };

    // Batch 1: a server call per decision.
    let one = limits(1);
    let (mut decisions, started) = (0u64, Instant::now());
    while started.elapsed() < span {
        if limiter.check(&one, Options::new()).await?.allowed {
            decisions += 1;
        }
    }
    rows.push(row(
        "check",
        1,
        decisions,
        decisions,
        started.elapsed().as_secs_f64(),
    ));

    for batch in [10, 50, 100] {
        let quota = AsyncQuota::new(
            limiter.clone(),
            limits(batch),
            batch,
            Duration::from_millis(500),
            monotonic(),
        )?;
        let started = Instant::now();
        while started.elapsed() < span {
            quota.take(1).await?;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let (decisions, calls) = {
            let ledger = quota.ledger.lock().await;
            (ledger.decisions, ledger.calls)
        };
        quota.close().await?;
        rows.push(row("quota", batch, decisions, calls, elapsed));
    }
    println!("{{\"rows\":[{}]}}", rows.join(","));
    Ok(())
}
