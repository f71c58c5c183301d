//! An axum service as the README sets it up, both layers at their defaults: load shedding on
//! the whole app, a rate limit on `/limited` (requests with no key on `/open` are not
//! limited). `REDIS_URL` names the server, `SERVICE` the shedder's key, `ON_ERROR` the
//! limiter's failure policy (`raise`, the default, `deny` or `allow`), `PORT` the port. The
//! repository's tests/clients.rs freezes the server under it: nothing may be shed once the
//! server is back.

use std::time::Duration;

use axum::routing::get;
use ratelimit_module::http::request::Parts;
use ratelimit_module::layer::{LoadSheddingLayer, RateLimitLayer};
use ratelimit_module::load::LoadShedder;
use ratelimit_module::{redis, AsyncRateLimiter, Config, Limiter, OnError};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
    let client = redis::Client::open(env("REDIS_URL")?)?;
    let on_error = match std::env::var("ON_ERROR").as_deref() {
        Ok("deny") => OnError::Deny,
        Ok("allow") => OnError::Allow,
        _ => OnError::Raise,
    };
    let limiter = AsyncRateLimiter::connect(&client, Config::default().on_error(on_error)).await?;
    let shedder_limiter = AsyncRateLimiter::connect(&client, Config::default()).await?;
    let shedder = LoadShedder::builder(shedder_limiter, env("SERVICE")?).build()?;
    let policies = vec![Limiter::rate("outage:", 100, Duration::from_secs(1)).burst(100)];
    let limits = RateLimitLayer::new(limiter, policies, |request: &Parts| {
        (request.uri.path() == "/limited").then(|| "everyone".to_owned())
    })?;
    let app = axum::Router::new()
        .route("/limited", get(|| async { "ok" }))
        .route("/open", get(|| async { "ok" }))
        .layer(limits)
        .layer(LoadSheddingLayer::new(shedder));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", env("PORT")?.parse()?)).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
