//! The async and sync clients on a Cluster (`REDIS_CLUSTER_URL`: one of its nodes; the
//! repository's tests/clients.rs starts one): keys in every slot range, several limiters in
//! one hash slot, leases, and the shared lists' transaction on the hash's node.

use std::time::Duration;

use ratelimit_module::{
    add_words, parse_lists, remove_words, AsyncRateLimiter, Config, Limiter, Options, RateLimiter,
};

const MINUTE: Duration = Duration::from_secs(60);

fn nodes() -> Vec<String> {
    vec![std::env::var("REDIS_CLUSTER_URL").expect(
        "REDIS_CLUSTER_URL must name a node of a Cluster with the module (the repository's \
         tests/clients.rs starts one and sets it)",
    )]
}

#[tokio::test]
async fn the_async_client_works_on_a_cluster() {
    let client = redis::cluster::ClusterClient::new(nodes()).unwrap();
    let connection = client.get_async_connection().await.unwrap();
    let limiter = AsyncRateLimiter::new(connection, Config::default()).unwrap();
    for i in 0..30 {
        let limits = [Limiter::log(format!("rs:async:{i}"), 1, MINUTE)];
        assert!(
            limiter
                .check(&limits, Options::new())
                .await
                .unwrap()
                .allowed
        );
        assert!(!limiter.peek(&limits, 1).await.unwrap().allowed);
    }
    let both = [
        Limiter::log("{rs:async}:a", 2, MINUTE),
        Limiter::throttle("{rs:async}:b", 0, 1, MINUTE),
    ];
    assert!(limiter.check(&both, Options::new()).await.unwrap().allowed);
    assert!(!limiter.check(&both, Options::new()).await.unwrap().allowed);
    let lease = limiter
        .acquire_lease("rs:async:lease", 1, MINUTE, 1)
        .await
        .unwrap();
    assert!(lease.allowed());
    assert!(limiter
        .release_lease("rs:async:lease", lease.id)
        .await
        .unwrap());
    // The lists' writes: one transaction, on the node of the hash's slot.
    limiter
        .transaction(&add_words("rs:async:lists", "deny", "203.0.113.7", "1"))
        .await
        .unwrap();
    limiter
        .transaction(&remove_words("rs:async:lists", "deny", "203.0.113.7"))
        .await
        .unwrap();
    limiter
        .transaction(&add_words("rs:async:lists", "allow", "svc-a", "1"))
        .await
        .unwrap();
    let all = limiter
        .call(&["HGETALL".into(), "rs:async:lists".into()])
        .await
        .unwrap();
    let lists = parse_lists(&all);
    assert_eq!(lists.len(), 1);
    assert_eq!(lists["allow"]["svc-a"], "1");
}

#[test]
fn the_sync_client_works_on_a_cluster() {
    let client = redis::cluster::ClusterClient::new(nodes()).unwrap();
    let limiter = RateLimiter::new(client.get_connection().unwrap(), Config::default()).unwrap();
    for i in 0..30 {
        let limits = [Limiter::window(format!("rs:sync:{i}"), 1, MINUTE)];
        assert!(limiter.check(&limits, Options::new()).unwrap().allowed);
        assert!(!limiter.check(&limits, Options::new()).unwrap().allowed);
    }
    // The redis crate's blocking Cluster connection has no pipelines, so no transactions:
    // the shared lists are written through the async client on a Cluster (documented).
    let refused = limiter.transaction(&add_words("rs:sync:lists", "deny", "x", "1"));
    assert!(
        matches!(refused, Err(ratelimit_module::Error::Refused(_))),
        "{refused:?}"
    );
}
