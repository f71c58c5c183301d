//! The tower layer in a real axum app over real HTTP, against a live server with the
//! module (`REDIS_URL`): 429 with the IETF fields and `Retry-After`, requests without a key
//! not limited, shadow mode, and the load gate's 503 by priority.

mod common;

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use common::{connection, unique, Response};
use ratelimit_module::layer::RateLimitLayer;
use ratelimit_module::{Algorithm, AsyncRateLimiter, Config, Limiter, Priority};

/// Serves `router` on a free loopback port, on a runtime of its own; the port.
fn serve(router: Router) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, router).await.unwrap();
            })
    });
    port
}

async fn app(prefix: &str, config: Config) -> u16 {
    let limiter = AsyncRateLimiter::shared(connection().await, config);
    // 5 in a burst, then 1 a minute, per client.
    let policies = vec![Limiter::throttle(
        format!("{prefix}:"),
        4,
        1,
        Duration::from_secs(60),
    )];
    let layer = RateLimitLayer::new(limiter, policies, |request: &http::request::Parts| {
        let client = request.headers.get("x-client")?;
        client.to_str().ok().map(str::to_owned)
    });
    serve(
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer),
    )
}

async fn fetch(port: u16, headers: &'static [(&'static str, &'static str)]) -> Response {
    tokio::task::spawn_blocking(move || common::get(port, "/", headers))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_request_gets_429_with_the_ratelimit_fields() {
    let port = app(&unique("axum"), Config::default()).await;
    let first = fetch(port, &[("x-client", "a")]).await;
    assert_eq!(first.status, 200);
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"burst\";q=5;w=300")
    );
    assert_eq!(first.header("ratelimit"), Some("\"burst\";r=4;t=60"));
    for _ in 0..4 {
        assert_eq!(fetch(port, &[("x-client", "a")]).await.status, 200);
    }
    let refused = fetch(port, &[("x-client", "a")]).await;
    assert_eq!(refused.status, 429);
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert!(refused
        .header("ratelimit")
        .unwrap()
        .starts_with("\"burst\";r=0;t="));
    // Another client has its own limit; a request without a key is not limited.
    assert_eq!(fetch(port, &[("x-client", "b")]).await.status, 200);
    for _ in 0..10 {
        let free = fetch(port, &[]).await;
        assert_eq!((free.status, free.header("ratelimit")), (200, None));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn in_shadow_mode_a_refused_request_goes_through() {
    let port = app(&unique("shadow"), Config::default().shadow(true)).await;
    for _ in 0..5 {
        assert_eq!(fetch(port, &[("x-client", "a")]).await.status, 200);
    }
    let over = fetch(port, &[("x-client", "a")]).await;
    assert_eq!(over.status, 200);
    assert!(over
        .header("ratelimit")
        .unwrap()
        .starts_with("\"burst\";r=0;"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_load_gate_sheds_by_priority_with_503() {
    let service = common::hot_service("load").await;
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default());
    let policies = vec![
        Limiter::window(format!("{{{service}}}:"), 100, Duration::from_secs(60))
            .algorithm(Algorithm::Anchored),
    ];
    let layer = RateLimitLayer::new(limiter, policies, |_: &http::request::Parts| {
        Some(String::new())
    })
    .load_gate(service.clone(), |request: &http::request::Parts| {
        let priority = request.headers.get("x-priority");
        Priority::parse(priority.and_then(|p| p.to_str().ok()).unwrap_or(""))
    });
    let port = serve(
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer),
    );
    let shed = fetch(port, &[("x-priority", "sheddable")]).await;
    assert_eq!((shed.status, shed.header("retry-after")), (503, Some("1")));
    let kept = fetch(port, &[("x-priority", "critical")]).await;
    assert_eq!(kept.status, 200);
    assert_eq!(kept.header("ratelimit"), Some("\"window\";r=99;t=60"));
}
