//! The async and sync clients against a live server with the module (`REDIS_URL`): every
//! command and option typed, quota leases and their bound, and the shared lists.

mod common;

use std::time::Duration;

use common::{client, connection, unique};
use ratelimit_module::{
    parse_lists, Algorithm, AsyncRateLimiter, Config, Counts, Error, LimitOptions, Limiter,
    LoadShedder, LocalLimit, OnError, Options, Priority, Quota, RateLimit, RateLimiter,
    SharedLists,
};

const SECOND: Duration = Duration::from_secs(1);

/// The factors `RL.LOAD.STATUS` gives for `service`: each name and its value.
async fn load_factors(
    admin: &mut redis::aio::MultiplexedConnection,
    service: &str,
) -> Vec<(String, f64)> {
    let status: Vec<redis::Value> = redis::cmd("RL.LOAD.STATUS")
        .arg(service)
        .query_async(admin)
        .await
        .unwrap();
    // Field names alternate with their values; "factors" is followed by name, value, ...
    let at = (status.iter())
        .position(|field| {
            redis::from_redis_value::<String>(field.clone()).is_ok_and(|f| f == "factors")
        })
        .expect("a factors field");
    let pairs: Vec<String> = redis::from_redis_value(status[at + 1].clone()).unwrap();
    (pairs.chunks_exact(2))
        .map(|pair| (pair[0].clone(), pair[1].parse().expect("a number")))
        .collect()
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

#[tokio::test]
async fn every_option_answers_typed() {
    let limiter = AsyncRateLimiter::new(connection().await, Config::default()).unwrap();
    let key = unique("options");
    let gcra = [Limiter::throttle(format!("{key}:gcra"), 1, 1, 10 * SECOND)];
    let first = limiter.check(&gcra, Options::new()).await.unwrap();
    assert_eq!(
        first,
        RateLimit {
            allowed: true,
            limit: 2,
            remaining: 1,
            retry_after: None,
            reset_after: first.reset_after,
            ..RateLimit::default()
        }
    );
    assert!(first.reset_after > 9 * SECOND && first.reset_after <= 10 * SECOND);
    limiter.check(&gcra, Options::new()).await.unwrap();
    // DELAY: the third waits its turn, 10 s on; a fourth would wait 20 s: refused.
    let delayed = limiter
        .check(&gcra, Options::new().delay(30 * SECOND))
        .await
        .unwrap();
    assert!(delayed.allowed && delayed.wait > 9 * SECOND && delayed.wait <= 10 * SECOND);
    let refused = limiter
        .check(&gcra, Options::new().delay(5 * SECOND))
        .await
        .unwrap();
    assert!(!refused.allowed);
    // AT_MOST: what fits.
    let batch =
        [Limiter::window(format!("{key}:window"), 5, 60 * SECOND).algorithm(Algorithm::Anchored)];
    let at_most = Options::new().quantity(3).at_most();
    assert_eq!(
        limiter.check(&batch, at_most).await.unwrap().granted,
        Some(3)
    );
    assert_eq!(
        limiter.check(&batch, at_most).await.unwrap().granted,
        Some(2)
    );
    // FORCE takes it all, owing what does not fit.
    let owed = [Limiter::log(format!("{key}:owed"), 3, 60 * SECOND)];
    let forced = limiter
        .check(&owed, Options::new().quantity(5).force())
        .await
        .unwrap();
    assert_eq!((forced.allowed, forced.remaining), (true, 0));
    // A refund gives back; a peek and the counts write nothing.
    let log = [Limiter::log(format!("{key}:log"), 3, 60 * SECOND)];
    limiter
        .check(&log, Options::new().quantity(2))
        .await
        .unwrap();
    let back = limiter
        .check(&log, Options::new().quantity(1).refund())
        .await
        .unwrap();
    assert_eq!(back.remaining, 2);
    // What taking 1 more would leave.
    assert_eq!(limiter.peek(&log, 1).await.unwrap().remaining, 1);
    let Counts::Log {
        count,
        newest_ends_in,
        ..
    } = limiter.counts(&log[0]).await.unwrap()
    else {
        panic!("a log's counts")
    };
    assert_eq!(count, 1);
    assert!(newest_ends_in > 59 * SECOND && newest_ends_in <= 60 * SECOND);
    // Several limiters, all or nothing, each one's own result.
    let both = [
        Limiter::window(format!("{{{key}}}:a"), 2, 60 * SECOND).named("minute"),
        Limiter::log(format!("{{{key}}}:b"), 1, 60 * SECOND).named("strict"),
    ];
    let first = limiter.check(&both, Options::new()).await.unwrap();
    assert!(first.allowed);
    assert_eq!(
        first
            .each
            .iter()
            .map(|one| one.remaining)
            .collect::<Vec<_>>(),
        [1, 0]
    );
    let second = limiter.check(&both, Options::new()).await.unwrap();
    assert!(!second.allowed);
    assert_eq!(
        second.each[0].remaining, 1,
        "the refusal counted nothing anywhere"
    );
    // BLOCK: a block starts from none and refuses while it lasts.
    let login = [Limiter::log(format!("{key}:login"), 1, 60 * SECOND)];
    let blocking = Options::new().block(ms(200));
    limiter.check(&login, blocking).await.unwrap();
    let blocked = limiter.check(&login, blocking).await.unwrap();
    assert_eq!(blocked.retry_after, Some(ms(200)));
    tokio::time::sleep(blocked.retry_after.unwrap() + ms(5)).await;
    assert!(limiter.check(&login, Options::new()).await.unwrap().allowed);
}

#[tokio::test]
async fn leases_are_held_released_and_renewed() {
    let limiter = AsyncRateLimiter::new(connection().await, Config::default()).unwrap();
    let key = unique("lease");
    let one = limiter
        .acquire_lease(&key, 2, 10 * SECOND, 1)
        .await
        .unwrap();
    let two = limiter
        .acquire_lease(&key, 2, 10 * SECOND, 1)
        .await
        .unwrap();
    assert!(one.allowed() && two.allowed() && one.id != two.id);
    let full = limiter
        .acquire_lease(&key, 2, 10 * SECOND, 1)
        .await
        .unwrap();
    assert_eq!((full.allowed(), full.id), (false, 0));
    assert!(!limiter
        .peek_lease(&key, 2, 10 * SECOND, 1)
        .await
        .unwrap()
        .allowed());
    assert!(limiter
        .renew_lease(&key, one.id, 20 * SECOND)
        .await
        .unwrap());
    assert!(limiter.release_lease(&key, one.id).await.unwrap());
    assert!(
        !limiter.release_lease(&key, one.id).await.unwrap(),
        "no longer held"
    );
    assert!(limiter
        .acquire_lease(&key, 2, 10 * SECOND, 1)
        .await
        .unwrap()
        .allowed());
}

#[tokio::test]
async fn top_lists_the_keys_refused_most() {
    let mut admin = connection().await;
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "ratelimit.top-keys", "128"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let limiter = AsyncRateLimiter::new(connection().await, Config::default()).unwrap();
    let key = unique("top");
    for _ in 0..3 {
        limiter
            .check(&[Limiter::log(&key, 1, 60 * SECOND)], Options::new())
            .await
            .unwrap();
    }
    let top = limiter.top(128).await.unwrap();
    let row = top
        .iter()
        .find(|row| row.key == key)
        .expect("the refused key");
    assert_eq!((row.refusals, row.error), (2, 0));
}

#[tokio::test]
async fn a_load_gate_sheds_by_priority_in_the_same_call() {
    let service = common::hot_service("load").await;
    let limiter = AsyncRateLimiter::new(connection().await, Config::default()).unwrap();
    let limit = Limiter::log(format!("{{{service}}}:limit"), 100, 60 * SECOND);
    let gate = |priority| Limiter::load(&service, priority);
    let shed = limiter
        .check(
            &[limit.clone(), gate(ratelimit_module::Priority::Sheddable)],
            Options::new(),
        )
        .await
        .unwrap();
    assert_eq!((shed.allowed, shed.shed_level), (false, 1));
    let kept = limiter
        .check(
            &[limit.clone(), gate(ratelimit_module::Priority::Critical)],
            Options::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        (kept.allowed, kept.shed_level, kept.each.len()),
        (true, 0, 1)
    );
    assert_eq!(kept.each[0].remaining, 99, "the shed request wrote nothing");
}

#[test]
fn the_sync_client_answers_as_the_async_one() {
    let limiter = RateLimiter::new(client().get_connection().unwrap(), Config::default()).unwrap();
    let key = unique("sync");
    let limits = [Limiter::log(&key, 2, 60 * SECOND)];
    let answers: Vec<bool> = (0..3)
        .map(|_| limiter.check(&limits, Options::new()).unwrap().allowed)
        .collect();
    assert_eq!(answers, [true, true, false]);
    let lease = limiter
        .acquire_lease(&format!("{key}:lease"), 1, 10 * SECOND, 1)
        .unwrap();
    assert!(
        lease.allowed()
            && limiter
                .release_lease(&format!("{key}:lease"), lease.id)
                .unwrap()
    );
}

#[test]
fn a_sync_quota_spends_what_it_took() {
    let limiter = RateLimiter::new(client().get_connection().unwrap(), Config::default()).unwrap();
    let key = unique("syncquota");
    let limits = vec![Limiter::window(&key, 1 << 40, 60 * SECOND).algorithm(Algorithm::Fixed)];
    let quota = Quota::new(
        &limiter,
        limits.clone(),
        50,
        60 * SECOND,
        ratelimit_module::monotonic(),
    )
    .unwrap();
    for _ in 0..500 {
        assert!(quota.take(1).unwrap());
    }
    let ledger = quota.ledger.lock().unwrap();
    assert_eq!((ledger.admitted, ledger.calls), (500, 10));
}

#[test]
fn a_binding_limit_costs_a_call_per_half_batch() {
    // 1,000 a second in bursts of 100, leases of 50: past the burst, the limit binds.
    let limiter = RateLimiter::new(client().get_connection().unwrap(), Config::default()).unwrap();
    let limits = vec![Limiter::throttle(unique("binding"), 99, 1000, SECOND)];
    let quota = Quota::new(&limiter, limits, 50, SECOND, ratelimit_module::monotonic()).unwrap();
    while quota.ledger.lock().unwrap().admitted < 600 {
        if !quota.take(1).unwrap() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let (admitted, calls) = {
        let ledger = quota.ledger.lock().unwrap();
        (ledger.admitted, ledger.calls)
    };
    // The burst in two calls, a third that gets what refilled, then half a batch a call.
    assert!(calls <= admitted / 25 + 3, "{calls} calls for {admitted}");
    quota.close().unwrap();
}

#[tokio::test]
async fn the_shared_lists_change_in_one_transaction_and_are_read_by_version() {
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let hash = unique("lists");
    let (now, clock) = common::manual_clock();
    let writer = SharedLists::new(limiter.clone(), &hash, SECOND, clock.clone());
    let reader = SharedLists::new(limiter.clone(), &hash, SECOND, clock);
    assert!(reader.read().await.unwrap().is_empty());
    writer.add("deny", "203.0.113.7", "1").await.unwrap();
    writer.add("allow", "svc-a", "1").await.unwrap();
    assert!(
        reader.read().await.unwrap().is_empty(),
        "not before the next check"
    );
    now.store(1_000, std::sync::atomic::Ordering::SeqCst);
    let lists = reader.read().await.unwrap();
    assert_eq!(lists["deny"]["203.0.113.7"], "1");
    writer.remove("deny", "203.0.113.7").await.unwrap();
    now.store(2_000, std::sync::atomic::Ordering::SeqCst);
    let lists = reader.read().await.unwrap();
    assert_eq!((lists.len(), lists["allow"]["svc-a"].as_str()), (1, "1"));
    // Each change one transaction: the version counts them.
    let version = limiter
        .call(&["HGET".into(), hash.clone(), "version".into()])
        .await
        .unwrap();
    assert_eq!(version, redis::Value::BulkString(b"3".to_vec()));
    let all = limiter.call(&["HGETALL".into(), hash]).await.unwrap();
    assert_eq!(parse_lists(&all).len(), 1);
}

#[test]
fn errors_are_told_apart_by_kind() {
    let limiter = RateLimiter::new(
        client().get_connection().unwrap(),
        Config::default().on_error(OnError::Allow),
    )
    .unwrap();
    // A call the server refuses is the caller's, whatever the policy: returned, not decided.
    let list = unique("a-list");
    limiter
        .call(&["RPUSH".into(), list.clone(), "x".into()])
        .unwrap();
    let refused = limiter.check(&[Limiter::log(list, 3, SECOND)], Options::new());
    match refused {
        Err(Error::Refused(error)) => assert_eq!(error.code(), Some("WRONGTYPE")),
        other => panic!("{other:?}"),
    }
    // One the module would refuse never reaches it.
    let bad = limiter.check(&[Limiter::log(unique("bad"), 0, SECOND)], Options::new());
    match bad {
        Err(Error::Invalid(error)) => assert!(error.to_string().contains("limit")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_load_shedder_reports_its_factors_and_sheds_by_priority() {
    let service = unique("shedder");
    let mut admin = connection().await;
    let _: String = redis::cmd("RL.LOAD.POLICY")
        .arg(&service)
        .arg(&["HOLD", "0", "LEVEL", "queue", "10"][..])
        .arg(&["SHARES", "1", "1", "0", "0"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let (now, clock) = common::manual_clock();
    let shedder = LoadShedder::builder(limiter.clone(), &service)
        .instance("web-1")
        .interval(SECOND)
        .factors(|| vec![("queue".to_owned(), 20.0)])
        .clock(clock)
        .build()
        .unwrap();
    // Nothing is shed before a report answers.
    let ticket = shedder
        .admit(Priority::Sheddable)
        .expect("nothing shed yet");
    shedder.finished(ticket, 200);
    let standing = shedder.report().await.unwrap();
    assert_eq!((standing.level, standing.instances), (1, 1));
    assert_eq!(standing.shares, [1.0, 1.0, 0.0, 0.0]);
    assert!(shedder.admit(Priority::Sheddable).is_none());
    assert!(shedder.admit(Priority::SheddablePlus).is_none());
    let critical = shedder.admit(Priority::Critical).expect("critical");
    let top = shedder
        .admit(Priority::CriticalPlus)
        .expect("critical_plus");
    shedder.finished(critical, 200);
    shedder.finished(top, 503);
    assert_eq!(shedder.retry_after(), SECOND);
    // Each report carries the process's health and its requests and their successes.
    shedder.report().await.unwrap();
    let factors = load_factors(&mut admin, &service).await;
    for factor in [
        "requests",
        "successes",
        "inflight",
        "latency",
        "errors",
        "cpu",
        "memory",
    ] {
        assert!(
            factors.iter().any(|(name, _)| name == factor),
            "{factor} in {factors:?}"
        );
    }
    // The level holds for 3 intervals.
    now.store(3_000, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(shedder.standing().level, 1);
    now.store(3_001, std::sync::atomic::Ordering::SeqCst);
    assert!(
        shedder.admit(Priority::Sheddable).is_some(),
        "a stale level sheds nothing"
    );
}

/// Each request's route reaches the signals: `min_rt` is each route's least latency weighted
/// by its requests over the busy seconds (a 1 ms check and a 30 ms request: 15.5 ms), not the
/// least of all (1 ms).
#[tokio::test]
async fn a_load_shedder_tells_its_signals_each_requests_route() {
    use std::sync::atomic::Ordering::SeqCst;
    let service = unique("signal-routes");
    let mut admin = connection().await;
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let (now, clock) = common::manual_clock();
    // One request at a time, congested at the first standing interval.
    let options = LimitOptions {
        initial: 1.0,
        floor: 1.0,
        enter: 1,
        ..LimitOptions::default()
    };
    let shedder = LoadShedder::builder(limiter, &service)
        .limit(options)
        .clock(clock)
        .build()
        .unwrap();
    // Second 10, not busy: a fast request (the no-load latency), then, the limit full, one
    // past the target.
    now.store(10_000, SeqCst);
    let ticket = shedder.admit(Priority::CriticalPlus).expect("admitted");
    now.store(10_001, SeqCst);
    shedder.finished_route(ticket, 200, "GET /warm");
    now.store(10_101, SeqCst);
    // The interval closed with room (the limit grew by its square root, to 2): fill it.
    let first = shedder.admit(Priority::CriticalPlus).expect("admitted");
    let second = shedder.admit(Priority::CriticalPlus).expect("admitted");
    assert!(
        shedder.admit(Priority::CriticalPlus).is_none(),
        "the limit is full"
    );
    now.store(10_121, SeqCst);
    shedder.finished_route(first, 200, "GET /warm");
    shedder.finished_route(second, 200, "GET /warm");
    // Second 11: the interval closes congested; a check of 1 ms and work of 30 ms, busy.
    now.store(11_500, SeqCst);
    let ticket = shedder.admit(Priority::CriticalPlus).expect("admitted");
    assert!(shedder.limit().unwrap().congested);
    now.store(11_501, SeqCst);
    shedder.finished_route(ticket, 200, "GET /health");
    let ticket = shedder.admit(Priority::CriticalPlus).expect("admitted");
    now.store(11_531, SeqCst);
    shedder.finished_route(ticket, 200, "GET /work");
    shedder.report().await.unwrap();
    let factors = load_factors(&mut admin, &service).await;
    let reported = |wanted: &str| factors.iter().find(|(name, _)| name == wanted).map(|f| f.1);
    assert_eq!(reported("max_rps"), Some(2.0), "{factors:?}");
    assert_eq!(reported("min_rt"), Some(15.5), "{factors:?}");
}

/// The documented setup, every option at its default, the default policy: a healthy
/// process sheds nothing, however many of its requests it reports.
#[tokio::test]
async fn a_load_shedder_with_its_defaults_sheds_nothing_from_a_healthy_service() {
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let shedder = LoadShedder::builder(limiter, unique("healthy"))
        .build()
        .unwrap();
    assert_eq!(shedder.report().await.unwrap().level, 0);
    let mut refused = 0;
    for number in 0..400 {
        match shedder.admit(Priority::ALL[number % 4]) {
            Some(ticket) => shedder.finished(ticket, 200),
            None => refused += 1,
        }
        if number % 100 == 0 {
            assert_eq!(shedder.report().await.unwrap().level, 0);
        }
    }
    assert_eq!(refused, 0);
    assert_eq!(shedder.limit().map(|limit| limit.congested), Some(false));
}

#[tokio::test]
async fn the_limiters_own_answers_leave_the_local_limit_unmeasured() {
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let (now, clock) = common::manual_clock();
    let advance = |millis| now.fetch_add(millis, std::sync::atomic::Ordering::SeqCst);
    let shedder = LoadShedder::builder(limiter, unique("own"))
        .clock(clock)
        .build()
        .unwrap();
    // The service answers one request in a millisecond: the no-load latency.
    let fast = shedder.admit(Priority::Critical).unwrap();
    advance(1);
    shedder.finished(fast, 200);
    // An interval later, 12 requests wait on a failing server's 1 s timeout and the limiter
    // answers them itself. Counted, a second would be a queue 160 times the target, and
    // congestion would begin at once; it is not the service's time, and nothing is measured.
    advance(100);
    let waiting: Vec<_> = (0..12)
        .map(|_| shedder.admit(Priority::Critical).unwrap())
        .collect();
    advance(1_000);
    for ticket in waiting {
        shedder.finished_by_limiter(ticket);
    }
    advance(100);
    let fast = shedder.admit(Priority::Critical).unwrap();
    shedder.finished(fast, 200);
    let limit = shedder.limit().unwrap();
    assert!(!limit.congested, "{limit:?}");
    assert_eq!(limit.in_flight, 0);
}

#[tokio::test]
async fn what_the_level_sheds_holds_the_processs_limit_congested() {
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let (now, clock) = common::manual_clock();
    let advance = |millis| now.fetch_add(millis, std::sync::atomic::Ordering::SeqCst);
    let shedder = LoadShedder::builder(limiter, common::hot_service("held").await)
        .clock(clock)
        .build()
        .unwrap();
    // A no-load latency of 5 ms, then 20 requests in flight, every one taking 100 ms or more:
    // a queue over four times the target, congestion at once.
    let fast = shedder.admit(Priority::Critical).unwrap();
    advance(5);
    shedder.finished(fast, 200);
    let slow: Vec<_> = (0..20)
        .map(|_| shedder.admit(Priority::Critical).unwrap())
        .collect();
    advance(100);
    for ticket in &slow[..10] {
        shedder.finished(*ticket, 200);
    }
    advance(100);
    for ticket in &slow[10..] {
        shedder.finished(*ticket, 200);
    }
    assert_eq!(shedder.report().await.unwrap().level, 1);
    // An interval in which the level refuses ten requests and leaves the limit one, fast,
    // under half the limit: the overload goes on, and congestion holds.
    advance(100);
    let ticket = shedder.admit(Priority::Critical).unwrap();
    advance(5);
    shedder.finished(ticket, 200);
    for _ in 0..10 {
        assert!(
            shedder.admit(Priority::Sheddable).is_none(),
            "level 1 sheds sheddable"
        );
    }
    advance(100);
    let ticket = shedder.admit(Priority::CriticalPlus).unwrap();
    let limit = shedder.limit().unwrap();
    assert!(
        limit.congested,
        "ten refused by the level, one admitted: {limit:?}"
    );
    // Intervals the level refuses nothing of: congestion ends at the fourth in a row.
    shedder.finished(ticket, 200);
    for calm in 1..4 {
        advance(100);
        let ticket = shedder.admit(Priority::CriticalPlus).unwrap();
        let limit = shedder.limit().unwrap();
        assert!(limit.congested, "{calm} calm intervals in a row: {limit:?}");
        shedder.finished(ticket, 200);
    }
    advance(100);
    shedder.admit(Priority::CriticalPlus);
    let limit = shedder.limit().unwrap();
    assert!(
        !limit.congested,
        "nothing refused, under half the limit: {limit:?}"
    );
}

#[tokio::test]
async fn a_standing_queue_sheds_the_least_important_first_by_the_processs_own_limit() {
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let (now, clock) = common::manual_clock();
    let shedder = LoadShedder::builder(limiter.clone(), unique("flood"))
        .clock(clock)
        .build()
        .unwrap();
    common::flood(&shedder, &now);
    // Cut to the peak times target / fastest, at least 0.2: 20 * 0.2 = 4; 9 in flight.
    assert_eq!(
        shedder.limit(),
        Some(LocalLimit {
            limit: 4.0,
            congested: true,
            in_flight: 9
        })
    );
    for priority in Priority::ALL {
        assert!(
            shedder.admit(priority).is_none(),
            "{priority}: 9 in flight of 4"
        );
    }
    // Without a limit of its own, only the level sheds.
    let alone = LoadShedder::builder(limiter, unique("alone"))
        .without_limit()
        .build()
        .unwrap();
    assert_eq!(alone.limit(), None);
    assert!((0..100).all(|_| alone.admit(Priority::Sheddable).is_some()));
}
