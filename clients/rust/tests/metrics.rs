//! The decisions and server calls, counted through the `metrics` facade into a recorder the
//! test installs (the one test of this binary: the recorder is global).

mod common;

use std::time::Duration;

use common::{connection, unique};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use ratelimit_module::{AsyncRateLimiter, Config, Limiter, Options};

#[tokio::test]
async fn decisions_are_counted_by_policy_and_outcome_and_calls_timed() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let limiter =
        AsyncRateLimiter::new(connection().await, Config::default().deny_cache(10)).unwrap();
    let policy = unique("policy").replace(':', "_");
    let limits = [Limiter::log(unique("metrics"), 2, Duration::from_secs(60)).named(&policy)];
    for _ in 0..4 {
        limiter.check(&limits, Options::new()).await.unwrap();
    }
    let mut outcomes = std::collections::BTreeMap::new();
    let mut timed = 0;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels: Vec<(String, String)> = key
            .key()
            .labels()
            .map(|label| (label.key().to_owned(), label.value().to_owned()))
            .collect();
        match (key.kind(), key.key().name(), value) {
            (MetricKind::Counter, "ratelimit_decisions_total", DebugValue::Counter(n))
                if labels.contains(&("policy".into(), policy.clone())) =>
            {
                let outcome = labels.iter().find(|(k, _)| k == "outcome").unwrap();
                outcomes.insert(outcome.1.clone(), n);
            }
            (
                MetricKind::Histogram,
                "ratelimit_server_call_duration_seconds",
                DebugValue::Histogram(values),
            ) => timed += values.len(),
            _ => {}
        }
    }
    // Two admitted, one refused by the server, one by the deny cache (no call).
    let wanted: std::collections::BTreeMap<String, u64> = [
        ("allowed".to_owned(), 2),
        ("refused".to_owned(), 1),
        ("deny_cache".to_owned(), 1),
    ]
    .into();
    assert_eq!(outcomes, wanted);
    assert_eq!(timed, 3);
}
