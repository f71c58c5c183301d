//! The tower layers in a real axum app over real HTTP, against a live server with the
//! module (`REDIS_URL`): 429 with the IETF fields and `Retry-After`, requests without a key
//! not limited, shadow mode, the load gate's 503 by priority, and the load-shedding layer:
//! nothing shed with its defaults, the level's 503 by priority, and the process's own limit
//! shedding a standing queue by priority.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use common::{connection, unique, Response};
use ratelimit_module::layer::{LoadSheddingLayer, RateLimitLayer};
use ratelimit_module::{
    Algorithm, AsyncRateLimiter, Config, Limiter, LoadShedder, LocalLimit, OnError, Priority,
};
use redis::Value;

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
    let limiter = AsyncRateLimiter::shared(connection().await, config).unwrap();
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
    })
    .unwrap();
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
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let policies = vec![
        Limiter::window(format!("{{{service}}}:"), 100, Duration::from_secs(60))
            .algorithm(Algorithm::Anchored),
    ];
    let layer = RateLimitLayer::new(limiter, policies, |_: &http::request::Parts| {
        Some(String::new())
    })
    .unwrap()
    .load_gate(service.clone(), |request: &http::request::Parts| {
        let priority = request.headers.get("x-priority");
        let name = priority.and_then(|p| p.to_str().ok()).unwrap_or("");
        name.parse().unwrap_or(Priority::Sheddable)
    })
    .unwrap();
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

/// A route that sleeps as many milliseconds as its `ms` query says.
fn sleeping() -> Router {
    Router::new()
        .route(
            "/",
            get(|query: axum::extract::RawQuery| async move {
                let millis = query
                    .0
                    .and_then(|q| q.strip_prefix("ms=").and_then(|n| n.parse().ok()))
                    .unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(millis)).await;
                "hello"
            }),
        )
        .route("/items/{number}", get(|| async { "item" }))
}

/// A server frozen as its client sees it: every command is sent (and counted), none answered.
#[derive(Clone, Default)]
struct Frozen(Arc<AtomicUsize>);

impl redis::aio::ConnectionLike for Frozen {
    fn req_packed_command<'a>(&'a mut self, _: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::pending())
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _: &'a redis::Pipeline,
        _: usize,
        _: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::pending())
    }

    fn get_db(&self) -> i64 {
        0
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_waiting_on_the_rate_limit_server_is_not_in_flight() {
    let healthy = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let shedder = LoadShedder::builder(healthy, unique("waits-layer"))
        .build()
        .unwrap();
    let frozen = Frozen::default();
    let config = Config::default()
        .timeout(Duration::from_secs(2))
        .on_error(OnError::Allow);
    let limiter = AsyncRateLimiter::shared(frozen.clone(), config).unwrap();
    let policies = vec![Limiter::throttle(
        unique("waits"),
        10,
        10,
        Duration::from_secs(1),
    )];
    let limits = RateLimitLayer::new(limiter, policies, |_: &http::request::Parts| {
        Some("everyone".to_owned())
    })
    .unwrap();
    let (watched, seen) = (shedder.clone(), Arc::new(AtomicUsize::new(usize::MAX)));
    let in_handler = seen.clone();
    let router = Router::new()
        .route(
            "/",
            get(move || {
                // The server's wait gave up: in flight again.
                let in_flight = watched.limit().unwrap().in_flight;
                in_handler.store(in_flight as usize, Ordering::SeqCst);
                async { "ok" }
            }),
        )
        .layer(limits)
        .layer(LoadSheddingLayer::new(shedder.clone()));
    let port = serve(router);
    // What the limiter sent before any request (its connection's own setup).
    let before = frozen.0.load(Ordering::SeqCst);
    let answered =
        tokio::task::spawn_blocking(move || common::get(port, "/", &[("x-priority", "critical")]));
    let sent = common::wait_until(Duration::from_secs(10), || {
        frozen.0.load(Ordering::SeqCst) > before
    });
    assert!(sent, "the call reached the frozen server");
    assert_eq!(
        shedder.limit().unwrap().in_flight,
        0,
        "waiting on the server"
    );
    assert_eq!(answered.await.unwrap().status, 200);
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_eq!(shedder.limit().unwrap().in_flight, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shedding_layer_with_its_defaults_sheds_nothing_from_a_healthy_service() {
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let shedder = LoadShedder::builder(limiter, unique("healthy-layer"))
        .build()
        .unwrap();
    let port = serve(sleeping().layer(LoadSheddingLayer::new(shedder.clone())));
    const CLASSES: [&[(&str, &str)]; 4] = [
        &[("x-priority", "critical_plus")],
        &[("x-priority", "critical")],
        &[("x-priority", "sheddable_plus")],
        &[("x-priority", "sheddable")],
    ];
    for number in 0..40 {
        let response = fetch(port, CLASSES[number % 4]).await;
        assert_eq!(response.status, 200, "{:?}", CLASSES[number % 4]);
    }
    assert_eq!(shedder.report().await.unwrap().level, 0);
    // Each route's latency is kept apart, named by its method and the pattern axum matched.
    for path in ["/items/1", "/items/2"] {
        let response = tokio::task::spawn_blocking(move || common::get(port, path, &[]))
            .await
            .unwrap();
        assert_eq!(response.status, 200, "{path}");
    }
    assert_eq!(shedder.routes(), ["GET /", "GET /items/{number}"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shedding_layer_sheds_by_the_level_with_503() {
    let service = unique("level-layer");
    let mut admin = connection().await;
    let _: String = redis::cmd("RL.LOAD.POLICY")
        .arg(&service)
        .arg(
            &[
                "HOLD", "0", "LEVEL", "queue", "10", "SHARES", "1", "1", "0", "0",
            ][..],
        )
        .query_async(&mut admin)
        .await
        .unwrap();
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let shedder = LoadShedder::builder(limiter, &service)
        .interval(Duration::from_secs(60))
        .factors(|| vec![("queue".to_owned(), 20.0)])
        .build()
        .unwrap();
    assert_eq!(shedder.report().await.unwrap().level, 1);
    let port = serve(sleeping().layer(LoadSheddingLayer::new(shedder)));
    let shed = fetch(port, &[("x-priority", "sheddable")]).await;
    assert_eq!((shed.status, shed.header("retry-after")), (503, Some("60")));
    assert_eq!(
        fetch(port, &[("x-priority", "no such class")]).await.status,
        503
    );
    assert_eq!(fetch(port, &[("x-priority", "critical")]).await.status, 200);
}

/// The upstream's latency is the route's sleep; what the test asserts follows from the
/// latencies the layer measured.
#[tokio::test(flavor = "multi_thread")]
async fn the_shedding_layer_sheds_a_standing_queue_by_the_processs_own_limit() {
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let shedder = LoadShedder::builder(limiter, unique("queue-layer"))
        .build()
        .unwrap();
    let port = serve(sleeping().layer(LoadSheddingLayer::new(shedder.clone())));
    let at_once = |count: usize, path: &'static str, priority: &'static str| async move {
        let calls: Vec<_> = (0..count)
            .map(|_| {
                tokio::task::spawn_blocking(move || {
                    common::get(port, path, &[("x-priority", priority)]).status
                })
            })
            .collect();
        let mut statuses = Vec::new();
        for call in calls {
            statuses.push(call.await.unwrap());
        }
        statuses
    };
    // The no-load latency, then a queue that stands: 15 at once, a second each.
    assert_eq!(at_once(1, "/?ms=1", "critical").await, [200]);
    assert_eq!(at_once(15, "/?ms=1000", "critical").await, [200; 15]);
    // The first of three more to end closes the interval the 15 ended in: congestion.
    assert_eq!(at_once(3, "/?ms=1000", "critical_plus").await, [200; 3]);
    assert_eq!(
        shedder.limit(),
        Some(LocalLimit {
            limit: 4.0,
            congested: true,
            in_flight: 0
        })
    );
    // Three in flight of 4: only critical_plus has room.
    let held = tokio::spawn(at_once(3, "/?ms=1000", "critical_plus"));
    for _ in 0..1_000 {
        if shedder.limit().is_some_and(|limit| limit.in_flight == 3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        shedder.limit(),
        Some(LocalLimit {
            limit: 4.0,
            congested: true,
            in_flight: 3
        })
    );
    assert_eq!(at_once(1, "/", "sheddable").await, [503]);
    assert_eq!(at_once(1, "/", "critical").await, [503]);
    assert_eq!(at_once(1, "/", "critical_plus").await, [200]);
    assert_eq!(held.await.unwrap(), [200; 3]);
}
