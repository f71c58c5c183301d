//! Bad input, in every call order, is an error before any call: never a panic, a round trip or
//! a hang. The clients here run over connections that count what is sent through them (no
//! server: a bad request must never need one), and every case asserts that nothing was.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit_module::layer::RateLimitLayer;
use ratelimit_module::load::LoadShedder;
use ratelimit_module::redis::{self, Cmd, Pipeline, RedisFuture, RedisResult, Value};
use ratelimit_module::{
    Algorithm, AsyncQuota, AsyncRateLimiter, Config, Error, LimitOptions, Limiter, Options,
    Priority, Quota, RateLimiter,
};

/// A connection that never reaches a server: it counts what is sent and answers that the
/// connection dropped.
#[derive(Clone, Default)]
struct Counting(Arc<AtomicUsize>);

impl Counting {
    fn sent(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    fn dropped() -> redis::RedisError {
        std::io::Error::from(std::io::ErrorKind::ConnectionReset).into()
    }
}

impl redis::aio::ConnectionLike for Counting {
    fn req_packed_command<'a>(&'a mut self, _: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Err(Counting::dropped()) })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _: &'a Pipeline,
        _: usize,
        _: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Err(Counting::dropped()) })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl redis::ConnectionLike for Counting {
    fn req_packed_command(&mut self, _: &[u8]) -> RedisResult<Value> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(Counting::dropped())
    }

    fn req_packed_commands(&mut self, _: &[u8], _: usize, _: usize) -> RedisResult<Vec<Value>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(Counting::dropped())
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        false
    }

    fn is_open(&self) -> bool {
        true
    }
}

impl ratelimit_module::BlockingConnection for Counting {
    fn bound(&mut self, _: Duration) -> redis::RedisResult<()> {
        Ok(())
    }
}

const SECOND: Duration = Duration::from_secs(1);

/// Requests the module would refuse, or builders used where they do not apply, each with a
/// word the error names.
fn bad_requests() -> Vec<(&'static str, Vec<Limiter>, Options)> {
    let rate = || Limiter::rate("k", 10, SECOND);
    let window = || Limiter::window("k", 10, SECOND);
    let many = (0..17)
        .map(|n| Limiter::log(format!("k{n}"), 1, SECOND))
        .collect();
    let gates = vec![
        Limiter::load("s", Priority::Critical),
        Limiter::load("s", Priority::Sheddable),
    ];
    vec![
        ("at least one limiter", vec![], Options::new()),
        ("at most 16", many, Options::new()),
        ("one load gate", gates, Options::new()),
        (
            "period",
            vec![Limiter::rate("k", 10, Duration::ZERO)],
            Options::new(),
        ),
        ("count", vec![Limiter::rate("k", 0, SECOND)], Options::new()),
        ("burst", vec![rate().burst(0)], Options::new()),
        ("a throttle's", vec![window().burst(5)], Options::new()),
        (
            "a window's",
            vec![rate().algorithm(Algorithm::Fixed)],
            Options::new(),
        ),
        (
            "a throttle's",
            vec![window().warmup(SECOND)],
            Options::new(),
        ),
        (
            "warmup",
            vec![rate().warmup(Duration::ZERO)],
            Options::new(),
        ),
        (
            "window",
            vec![Limiter::window("k", 10, Duration::ZERO)],
            Options::new(),
        ),
        ("limit", vec![Limiter::log("k", 0, SECOND)], Options::new()),
        (
            "BUCKETS",
            vec![window().algorithm(Algorithm::Buckets(0))],
            Options::new(),
        ),
        (
            "lease",
            vec![Limiter::slots("k", 2, Duration::ZERO)],
            Options::new(),
        ),
        ("key", vec![Limiter::log("", 3, SECOND)], Options::new()),
        ("name", vec![rate().named("a\"b")], Options::new()),
        (
            "longer",
            vec![Limiter::log("k", 3, Duration::MAX)],
            Options::new(),
        ),
        ("quantity", vec![rate()], Options::new().quantity(u64::MAX)),
        ("block", vec![rate()], Options::new().block(Duration::ZERO)),
        ("block", vec![rate()], Options::new().block(SECOND).force()),
        ("refund", vec![rate()], Options::new().refund().at_most()),
    ]
}

fn is_invalid(error: &Error, word: &str) -> bool {
    matches!(error, Error::Invalid(_)) && error.to_string().contains(word)
}

#[tokio::test]
async fn the_async_client_refuses_bad_requests_before_any_call() {
    let connection = Counting::default();
    let limiter = AsyncRateLimiter::new(connection.clone(), Config::default()).unwrap();
    for (word, limiters, options) in bad_requests() {
        let error = limiter.check(&limiters, options).await.unwrap_err();
        assert!(is_invalid(&error, word), "{word}: {error}");
    }
    for limiters in [vec![], vec![Limiter::rate("k", 1, SECOND).burst(0)]] {
        assert!(matches!(
            limiter.peek(&limiters, 1).await,
            Err(Error::Invalid(_))
        ));
        let acquired = limiter.acquire(&limiters, 1, SECOND).await;
        assert!(matches!(acquired, Err(Error::Invalid(_))));
        let shadowed = limiter.check_shadow(&limiters, Options::new(), true).await;
        assert!(matches!(shadowed, Err(Error::Invalid(_))));
    }
    let error = limiter.acquire_lease("k", 0, SECOND, 1).await.unwrap_err();
    assert!(is_invalid(&error, "limit"), "{error}");
    let error = limiter.renew_lease("k", 7, Duration::ZERO).await;
    assert!(is_invalid(&error.unwrap_err(), "lease"));
    let error = limiter.counts(&Limiter::rate("k", 1, SECOND)).await;
    assert!(is_invalid(&error.unwrap_err(), "counts"));
    assert_eq!(connection.sent(), 0, "nothing was sent");
}

#[test]
fn the_blocking_client_refuses_bad_requests_before_any_call() {
    let connection = Counting::default();
    let limiter = RateLimiter::new(connection.clone(), Config::default()).unwrap();
    for (word, limiters, options) in bad_requests() {
        let error = limiter.check(&limiters, options).unwrap_err();
        assert!(is_invalid(&error, word), "{word}: {error}");
    }
    let error = limiter
        .acquire_lease("k", 3, Duration::ZERO, 1)
        .unwrap_err();
    assert!(is_invalid(&error, "lease"), "{error}");
    assert_eq!(connection.sent(), 0, "nothing was sent");
}

#[test]
fn a_client_refuses_a_deadline_or_cool_down_of_zero() {
    for config in [
        Config::default().timeout(Duration::ZERO),
        Config::default().cooldown(Duration::ZERO),
    ] {
        let error = AsyncRateLimiter::new(Counting::default(), config.clone()).unwrap_err();
        assert!(matches!(error, Error::Invalid(_)), "{error}");
        let error = RateLimiter::new(Counting::default(), config).unwrap_err();
        assert!(matches!(error, Error::Invalid(_)), "{error}");
    }
}

#[tokio::test]
async fn quotas_layers_and_shedders_refuse_what_they_cannot_work_with() {
    let connection = Counting::default();
    let limiter = AsyncRateLimiter::shared(connection.clone(), Config::default()).unwrap();
    let window = vec![Limiter::window("q", 100, SECOND)];
    let clock = ratelimit_module::monotonic();
    let quota = AsyncQuota::new(limiter.clone(), window.clone(), 0, SECOND, clock.clone());
    assert!(quota.unwrap_err().to_string().contains("batch"));
    let quota = AsyncQuota::new(
        limiter.clone(),
        window.clone(),
        5,
        Duration::ZERO,
        clock.clone(),
    );
    assert!(quota.unwrap_err().to_string().contains("hold"));
    let quota = AsyncQuota::new(limiter.clone(), vec![], 5, SECOND, clock.clone());
    assert!(quota
        .unwrap_err()
        .to_string()
        .contains("at least one limiter"));
    let blocking = RateLimiter::new(connection.clone(), Config::default()).unwrap();
    assert!(Quota::new(&blocking, window.clone(), 0, SECOND, clock).is_err());

    let key = |_: &ratelimit_module::http::request::Parts| Some("k".to_owned());
    let layer = RateLimitLayer::new(limiter.clone(), vec![], key);
    assert!(layer
        .unwrap_err()
        .to_string()
        .contains("at least one limiter"));
    let burst = vec![Limiter::rate("rl:", 10, SECOND).burst(0)];
    assert!(RateLimitLayer::new(limiter.clone(), burst, key).is_err());
    let sixteen = (0..16)
        .map(|n| Limiter::log(format!("{n}:"), 1, SECOND))
        .collect();
    let full = RateLimitLayer::new(limiter.clone(), sixteen, key).unwrap();
    let gated = full.load_gate("load:s", |_: &ratelimit_module::http::request::Parts| {
        Priority::Critical
    });
    assert!(gated.unwrap_err().to_string().contains("at most 16"));

    for (word, builder) in [
        ("service", LoadShedder::builder(limiter.clone(), "")),
        (
            "instance",
            LoadShedder::builder(limiter.clone(), "s").instance("a b"),
        ),
        (
            "interval",
            LoadShedder::builder(limiter.clone(), "s").interval(Duration::ZERO),
        ),
        (
            "time to live",
            LoadShedder::builder(limiter.clone(), "s").ttl(Duration::ZERO),
        ),
    ] {
        let error = builder.build().unwrap_err();
        assert!(error.to_string().contains(word), "{word}: {error}");
    }
    let defaults = LimitOptions::default;
    for (word, options) in [
        (
            "floor",
            LimitOptions {
                floor: 0.0,
                ..defaults()
            },
        ),
        (
            "floor",
            LimitOptions {
                initial: 2000.0,
                ..defaults()
            },
        ),
        (
            "interval",
            LimitOptions {
                interval: Duration::ZERO,
                ..defaults()
            },
        ),
        (
            "decay",
            LimitOptions {
                decay: 0.0,
                ..defaults()
            },
        ),
        (
            "enter",
            LimitOptions {
                enter: 0,
                ..defaults()
            },
        ),
        (
            "finite",
            LimitOptions {
                ceiling: f64::NAN,
                ..defaults()
            },
        ),
        (
            "shares",
            LimitOptions {
                shares: [1.0, 0.2, 0.4, 0.2],
                ..defaults()
            },
        ),
        (
            "shares",
            LimitOptions {
                shares: [1.5, 0.6, 0.4, 0.2],
                ..defaults()
            },
        ),
    ] {
        let built = LoadShedder::builder(limiter.clone(), "s")
            .limit(options)
            .build();
        let error = built.unwrap_err();
        assert!(error.to_string().contains(word), "{word}: {error}");
    }
    let endless = LimitOptions {
        deep: f64::INFINITY,
        ..defaults()
    };
    assert!(LoadShedder::builder(limiter, "s")
        .limit(endless)
        .build()
        .is_ok());
    assert_eq!(connection.sent(), 0, "nothing was sent");
}
