//! An axum service behind the crate's two layers, as the crate's README sets them up: load
//! shedding by priority outside, each caller's limits inside, and a failing server letting
//! requests through (`OnError::Allow`: the limits protect the service, they are not it).
//!
//! ```sh
//! cargo run --release --manifest-path examples/rust/Cargo.toml --bin axum_service
//! # REDIS_URL (redis://127.0.0.1:6379), PORT (3000)
//! curl -i -H 'x-api-key: alice' http://127.0.0.1:3000/
//! ```

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use ratelimit_module::http::request::Parts;
use ratelimit_module::layer::{LoadSheddingLayer, RateLimitLayer};
use ratelimit_module::load::LoadShedder;
use ratelimit_module::{redis, AsyncRateLimiter, Config, Limiter, OnError};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let port: u16 = std::env::var("PORT").map_or(Ok(3000), |port| port.parse())?;
    let client = redis::Client::open(url)?;
    let limiter =
        AsyncRateLimiter::connect(&client, Config::default().on_error(OnError::Allow)).await?;
    // Per API key: 5 at once, then 1 a second; and 1,000 a day. Keys "example:burst:<key>".
    let policies = vec![
        Limiter::rate("example:burst:", 1, Duration::from_secs(1)).burst(5),
        Limiter::window("example:day:", 1_000, Duration::from_secs(86_400)).named("day"),
    ];
    let limits = RateLimitLayer::new(limiter.clone(), policies, |request: &Parts| {
        request
            .headers
            .get("x-api-key")?
            .to_str()
            .ok()
            .map(str::to_owned)
    })?;
    // Every option at its default: the process's own limit, the fleet's level by priority.
    let shedding = LoadSheddingLayer::new(LoadShedder::builder(limiter, "example:load").build()?);
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limits)
        .layer(shedding);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
