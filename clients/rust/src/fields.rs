//! The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11) from a result:
//!
//! ```text
//! RateLimit-Policy: "burst";q=5;w=300, "daily";q=1000;w=86400
//! RateLimit: "burst";r=4;t=60, "daily";r=999;t=86400
//! ```
//!
//! and `Retry-After` on a refusal. Times round up to whole seconds.

use std::time::Duration;

use crate::protocol::{Kind, Limiter, RateLimit};

/// Whole seconds, rounded up: a client that waits this long is never early.
pub fn seconds(duration: Duration) -> u64 {
    let whole = duration.as_secs();
    if duration.subsec_nanos() > 0 {
        whole + 1
    } else {
        whole
    }
}

/// The HTTP fields for a result, in order: `RateLimit-Policy` (one item per limiter, named
/// by it: `"name";q=<limit>;w=<window s>`), `RateLimit` (`"name";r=<remaining>;t=<reset
/// s>`) and, when refused, `Retry-After`. A load gate has no policy.
pub fn fields(result: &RateLimit, limiters: &[Limiter]) -> Vec<(&'static str, String)> {
    let each: Vec<&RateLimit> = if result.each.is_empty() {
        vec![result]
    } else {
        result.each.iter().collect()
    };
    let limiters = limiters
        .iter()
        .filter(|limiter| !matches!(limiter.kind, Kind::Load { .. }));
    let mut policies = Vec::new();
    let mut states = Vec::new();
    for (limiter, one) in limiters.zip(each) {
        policies.push(format!(
            "\"{}\";q={};w={}",
            limiter.name,
            one.limit,
            seconds(limiter.policy_window())
        ));
        states.push(format!(
            "\"{}\";r={};t={}",
            limiter.name,
            one.remaining,
            seconds(one.reset_after)
        ));
    }
    let mut fields = vec![
        ("RateLimit-Policy", policies.join(", ")),
        ("RateLimit", states.join(", ")),
    ];
    if let (false, Some(retry_after)) = (result.allowed, result.retry_after) {
        fields.push(("Retry-After", seconds(retry_after).to_string()));
    }
    fields
}
