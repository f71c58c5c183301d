//! The server frozen (`SIGSTOP`, as a stalled or partitioned server looks to its clients):
//! every call answers within the client's deadline with what `on_error` says, leases
//! included; after the cool-down one call probes while the others keep the policy; the
//! tower layer answers 503 under `Deny`; a limiter the crate connected waits
//! `Config::timeout`, below or above the redis crate's own 500 ms; the load shedder sheds no level it cannot learn, while
//! the process's own limit still sheds a standing queue; and service resumes once the server
//! does. The
//! server is `REDIS_URL`'s, on this machine (its pid from `INFO`); this binary holds one
//! test, so that nothing else runs while it is frozen.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use common::{client, connection};
use ratelimit_module::layer::RateLimitLayer;
use ratelimit_module::{
    AsyncRateLimiter, Config, Error, Limiter, LoadShedder, OnError, Options, Priority,
};

/// Continues the server when dropped, whatever happened.
struct Frozen(u32);

impl Frozen {
    fn freeze(pid: u32) -> Frozen {
        signal(libc::SIGSTOP, pid);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(libc::SIGCONT, self.0);
    }
}

fn signal(which: libc::c_int, pid: u32) {
    // SAFETY: kill(2) only sends a signal to the process the server reported as its own.
    let sent = unsafe { libc::kill(pid as libc::pid_t, which) };
    assert_eq!(sent, 0, "signal {which} to {pid}");
}

async fn info(section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(&mut connection().await)
        .await
        .unwrap()
}

async fn log_calls() -> i64 {
    let info = info("ratelimit").await;
    info.lines()
        .find_map(|line| line.strip_prefix("ratelimit_rl.log:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

const TIMEOUT: Duration = Duration::from_millis(200);
const LONG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_server_costs_the_deadline_then_the_policy_decides() {
    let pid: u32 = info("server")
        .await
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let config = |on_error| {
        Config::default()
            .timeout(TIMEOUT)
            .on_error(on_error)
            .cooldown(LONG)
    };
    let allowing = AsyncRateLimiter::new(connection().await, config(OnError::Allow)).unwrap();
    let denying = AsyncRateLimiter::new(connection().await, config(OnError::Deny)).unwrap();
    let raising = AsyncRateLimiter::new(connection().await, config(OnError::Raise)).unwrap();
    // The probing limiter's clock is the test's: its cool-down ends when the test says.
    let now = Arc::new(AtomicU64::new(0));
    let read = now.clone();
    // Its connection, kept: a call on it after the server resumes is answered only once every
    // call the limiter sent before it has been.
    let mut probing_connection = connection().await;
    let probing = Arc::new(
        AsyncRateLimiter::new(
            probing_connection.clone(),
            config(OnError::Deny)
                .cooldown(Duration::from_secs(1))
                .clock(Arc::new(move || {
                    Duration::from_millis(read.load(Ordering::SeqCst))
                })),
        )
        .unwrap(),
    );
    let layered = AsyncRateLimiter::shared(connection().await, config(OnError::Deny)).unwrap();
    let layer = RateLimitLayer::new(
        layered,
        vec![Limiter::log("rs:frozen:http:", 5, LONG)],
        |_: &http::request::Parts| Some("k".into()),
    )
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let app = Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer);
        axum::serve(listener, app).await.unwrap();
    });
    let limits = [Limiter::log("rs:frozen", 5, LONG)];
    let shedding = AsyncRateLimiter::shared(connection().await, config(OnError::Allow)).unwrap();
    // Connected by the crate, the deadline is `Config::timeout`'s alone, below or above the
    // redis crate's own 500 ms.
    let mut bounded = Vec::new();
    for deadline in [Duration::from_millis(300), Duration::from_millis(800)] {
        let config = Config::default().timeout(deadline).cooldown(LONG);
        bounded.push((
            deadline,
            AsyncRateLimiter::connect(&client(), config).await.unwrap(),
        ));
    }
    let before = log_calls().await;

    let frozen = Frozen::freeze(pid);
    let allowed = allowing.check(&limits, Options::new()).await.unwrap();
    assert_eq!((allowed.allowed, allowed.failed), (true, true));
    let denied = denying.check(&limits, Options::new()).await.unwrap();
    assert_eq!((denied.allowed, denied.failed), (false, true));
    assert!(denied.retry_after.unwrap() > LONG - Duration::from_secs(5));
    match raising.check(&limits, Options::new()).await {
        Err(Error::Timeout(after)) => assert_eq!(after, TIMEOUT),
        other => panic!("{other:?}"),
    }
    match raising.check(&limits, Options::new()).await {
        Err(Error::Unavailable { .. }) => {}
        other => panic!("{other:?}"),
    }
    for (deadline, limiter) in &bounded {
        let started = Instant::now();
        // Our deadline's error, not the connection's (`Error::Server`, timed out).
        match limiter.check(&limits, Options::new()).await {
            Err(Error::Timeout(after)) => assert_eq!(after, *deadline),
            other => panic!("{deadline:?}: {other:?}"),
        }
        let waited = started.elapsed();
        assert!(
            waited >= *deadline && waited < *deadline + LONG,
            "{deadline:?}: {waited:?}"
        );
    }
    // Leases follow the policy, without asking (the circuits are open).
    let lease = allowing
        .acquire_lease("rs:frozen:lease", 2, LONG, 1)
        .await
        .unwrap();
    assert_eq!(
        (lease.allowed(), lease.id, lease.result.failed),
        (true, 0, true)
    );
    assert!(allowing
        .renew_lease("rs:frozen:lease", 7, LONG)
        .await
        .unwrap());
    assert!(!allowing.release_lease("rs:frozen:lease", 7).await.unwrap());
    let refused = denying
        .acquire_lease("rs:frozen:lease", 2, LONG, 1)
        .await
        .unwrap();
    assert_eq!((refused.allowed(), refused.id), (false, 0));
    assert!(!denying
        .renew_lease("rs:frozen:lease", 7, LONG)
        .await
        .unwrap());
    // The probe: the first call fails; after the cool-down, eight at once send one.
    assert!(probing.check(&limits, Options::new()).await.unwrap().failed);
    now.store(1_000, Ordering::SeqCst);
    let mut waiting = Vec::new();
    for _ in 0..8 {
        let probing = probing.clone();
        let limits = limits.clone();
        waiting.push(tokio::spawn(async move {
            probing.check(&limits, Options::new()).await.unwrap()
        }));
    }
    for answer in waiting {
        let answer = answer.await.unwrap();
        assert!(answer.failed && !answer.allowed);
    }
    // Over HTTP, under Deny: 503 with when to come back.
    let refused = tokio::task::spawn_blocking(move || common::get(port, "/", &[]))
        .await
        .unwrap();
    assert_eq!(refused.status, 503);
    assert!(refused.header("retry-after").is_some());
    // Load shedding: the report gets no answer within the deadline, so no level sheds; the
    // process's own limit, which needs no server, still sheds a standing queue by priority.
    let shed_clock = Arc::new(AtomicU64::new(0));
    let read = shed_clock.clone();
    let shedder = LoadShedder::builder(shedding, "rs:frozen:load")
        .clock(Arc::new(move || {
            Duration::from_millis(read.load(Ordering::SeqCst))
        }))
        .build()
        .unwrap();
    assert_eq!(shedder.report().await, None);
    assert_eq!(shedder.standing().level, 0);
    common::flood(&shedder, &shed_clock);
    assert!(shedder.admit(Priority::Sheddable).is_none());
    assert!(
        shedder.admit(Priority::CriticalPlus).is_none(),
        "9 in flight of 4"
    );
    drop(frozen);

    // What was sent reaches the server once it runs: the three first calls, the two with
    // their own deadlines, the probing limiter's first call and its one probe, the layer's
    // one call.
    let sent = 3 + 2 + 2 + 1;
    // Bounded: 10 s for the server to read what waits in its sockets.
    for _ in 0..500 {
        if log_calls().await - before >= sent {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // No time waited for calls that might still come: the probing limiter's connection
    // answers a PING after everything the eight sent on it, so any second probe has reached
    // the server by then. The others' limiters are not asked again (their circuits are open).
    let _: String = redis::cmd("PING")
        .query_async(&mut probing_connection)
        .await
        .unwrap();
    assert_eq!(log_calls().await - before, sent, "one probe, not eight");
    // Service resumes: a limiter with a short cool-down asks again and is answered.
    let resumed = AsyncRateLimiter::new(
        connection().await,
        config(OnError::Deny).cooldown(Duration::from_millis(100)),
    )
    .unwrap();
    assert!(!resumed.check(&limits, Options::new()).await.unwrap().failed);
}
