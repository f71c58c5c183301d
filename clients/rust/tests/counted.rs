//! What the server is asked, counted by the server itself (`INFO ratelimit`): a flood of a
//! refused key answered by the deny cache, and a used-up quota. Each test counts a command
//! no other test of this binary sends (`RL.LOG`, `RL.WINDOW`), as they run at once.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{connection, unique};
use ratelimit_module::{Algorithm, AsyncQuota, AsyncRateLimiter, Config, Limiter, Options};

const SECOND: Duration = Duration::from_secs(1);

async fn calls(command: &str) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("ratelimit")
        .query_async(&mut connection().await)
        .await
        .unwrap();
    let line = info
        .lines()
        .find(|line| line.starts_with(&format!("ratelimit_{command}:")))
        .unwrap_or_else(|| panic!("{command} in {info}"));
    line.split(['=', ',']).nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_deny_cache_answers_a_flood_with_one_call() {
    let limiter =
        AsyncRateLimiter::new(connection().await, Config::default().deny_cache(100)).unwrap();
    let key = unique("flood");
    let limits = [Limiter::log(&key, 2, 60 * SECOND)];
    for _ in 0..2 {
        assert!(
            limiter
                .check(&limits, Options::new())
                .await
                .unwrap()
                .allowed
        );
    }
    let before = calls("rl.log").await;
    let mut answers = Vec::new();
    for _ in 0..1000 {
        answers.push(limiter.check(&limits, Options::new()).await.unwrap());
    }
    assert_eq!(
        calls("rl.log").await - before,
        1,
        "one call, then the cache"
    );
    assert!(answers.iter().all(|answer| !answer.allowed));
    assert!(answers[999].retry_after <= answers[0].retry_after);
}

#[tokio::test]
async fn a_quota_admits_within_its_bound_and_a_refused_one_asks_once_per_retry_after() {
    let limiter = AsyncRateLimiter::shared(connection().await, Config::default()).unwrap();
    let key = unique("quota");
    // 40 a minute; four quotas of batch 10: at most 40 + 4 x 10 admitted, and at least 40.
    let limits = vec![Limiter::window(&key, 40, 60 * SECOND).algorithm(Algorithm::Anchored)];
    let quotas: Vec<Arc<AsyncQuota<_>>> = (0..4)
        .map(|_| {
            AsyncQuota::new(
                limiter.clone(),
                limits.clone(),
                10,
                60 * SECOND,
                ratelimit_module::monotonic(),
            )
            .unwrap()
        })
        .collect();
    let mut admitted = 0;
    for round in 0..30 {
        for quota in &quotas {
            if quota.take(1).await.unwrap() {
                admitted += 1;
            }
        }
        let _ = round;
    }
    assert!((40..=80).contains(&admitted), "{admitted}");
    // Used up: a thousand takes of one quota cost at most one server call.
    let before = calls("rl.window").await;
    for _ in 0..1000 {
        assert!(!quotas[0].take(1).await.unwrap());
    }
    assert!(calls("rl.window").await - before <= 1);
    for quota in &quotas {
        quota.close().await.unwrap();
    }
    // What was held and unspent went back: the log counts only what was spent.
    let spent = limiter.peek(&limits, 1).await.unwrap();
    assert_eq!(spent.remaining, 40 - admitted.min(40));
}
