//! One axum app, four routes, for `bench/layer.py` (BENCHMARKS.md): `/bare` (no limit),
//! `/governor` (tower_governor's layer, in the process), `/module` (this crate's
//! `RateLimitLayer`, a server call a request) and `/ping` (a bare `PING` to the server on the
//! same connection, a request: the round trip alone). Every limit is keyed by the request's
//! `x-api-key` and set far above the load, so that what is measured is what each costs a
//! request that is admitted.
//!
//! ```sh
//! cargo run --release --example layer_bench -- <redis port> <http port>
//! ```

use std::num::NonZeroU32;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use ratelimit_module::http::request::Parts;
use ratelimit_module::http::Request;
use ratelimit_module::layer::RateLimitLayer;
use ratelimit_module::{redis, AsyncRateLimiter, Config, Limiter};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

/// tower_governor keyed as this crate's layer is: by `x-api-key`.
#[derive(Clone)]
struct ApiKey;

impl KeyExtractor for ApiKey {
    type Key = String;

    fn extract<T>(&self, request: &Request<T>) -> Result<Self::Key, GovernorError> {
        request
            .headers()
            .get("x-api-key")
            .and_then(|key| key.to_str().ok())
            .map(str::to_owned)
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut arguments = std::env::args().skip(1);
    let redis_port: u16 = arguments.next().ok_or("the server's port")?.parse()?;
    let http_port: u16 = arguments.next().ok_or("the port to serve on")?.parse()?;
    let client = redis::Client::open(format!("redis://127.0.0.1:{redis_port}/"))?;
    let limiter = AsyncRateLimiter::connect(&client, Config::default()).await?;
    let module = RateLimitLayer::new(
        limiter,
        vec![Limiter::rate("bench:layer:", 1 << 40, Duration::from_secs(1)).burst(1 << 30)],
        |request: &Parts| {
            request
                .headers
                .get("x-api-key")?
                .to_str()
                .ok()
                .map(str::to_owned)
        },
    )?;
    let governor = GovernorConfigBuilder::default()
        .key_extractor(ApiKey)
        .per_nanosecond(1)
        .burst_size(NonZeroU32::MAX.get())
        .finish()
        .ok_or("the governor's configuration")?;
    let connection = client.get_multiplexed_async_connection().await?;
    let ping = get(move || {
        let mut connection = connection.clone();
        async move {
            let pong: String = redis::cmd("PING")
                .query_async(&mut connection)
                .await
                .unwrap();
            pong
        }
    });
    let app = Router::new()
        .route("/bare", get(|| async { "ok" }))
        .route(
            "/governor",
            get(|| async { "ok" }).layer(GovernorLayer::new(governor)),
        )
        .route("/module", get(|| async { "ok" }).layer(module))
        .route("/ping", ping);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", http_port)).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
