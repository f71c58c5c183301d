//! The async client, over the redis crate's tokio connections: a `MultiplexedConnection`, a
//! `ConnectionManager` or a Cluster's connection, each call within a deadline of its own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Value;

use crate::policy::{Config, Policy, Step};
use crate::protocol::{
    cmd, counts_words, integers, lease_words, release_words, renew_words, top_keys, top_words,
    Counts, Lease, Limiter, Options, RateLimit, TopKey,
};
use crate::resilience::Error;

/// Every command of the module on one async connection, with typed results.
///
/// The connection is cloned for each call (the redis crate's multiplexed and Cluster
/// connections are cheap to clone). Every call waits at most [`Config::timeout`]; when the
/// server fails, [`Config::on_error`] decides, and for [`Config::cooldown`] after a failure
/// decisions are taken that way without asking, then one call probes the server while the
/// others still decide that way. Leases follow the same policy.
pub struct AsyncRateLimiter<C> {
    connection: C,
    policy: Policy,
    timeout: Duration,
}

impl<C> fmt::Debug for AsyncRateLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncRateLimiter")
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl AsyncRateLimiter<redis::aio::MultiplexedConnection> {
    /// A limiter shared by tasks and the tower layer, over a new multiplexed connection of
    /// `client`, every call bounded by [`Config::timeout`] and nothing else: the connection
    /// is made with no response timeout of its own (the redis crate's 500 ms would end calls
    /// first), and its connection attempt waits at most `config.timeout` too.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), ratelimit_module::Error> {
    /// use ratelimit_module::{redis, AsyncRateLimiter, Config};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let limiter = AsyncRateLimiter::connect(&client, Config::default()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(client: &redis::Client, config: Config) -> Result<Arc<Self>, Error> {
        config.validate()?;
        let settings = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(config.timeout))
            .set_response_timeout(None);
        let connection = client
            .get_multiplexed_async_connection_with_config(&settings)
            .await?;
        Self::shared(connection, config)
    }
}

impl<C> AsyncRateLimiter<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A limiter over `connection` with `config`; an error for a config no client can work
    /// with ([`Config::validate`]).
    pub fn new(connection: C, config: Config) -> Result<Self, Error> {
        Ok(AsyncRateLimiter {
            connection,
            policy: Policy::new(&config)?,
            timeout: config.timeout,
        })
    }

    /// A limiter shared by tasks and the tower layer.
    ///
    /// A connection keeps its own response timeout, and the redis crate gives its
    /// `MultiplexedConnection` and `ConnectionManager` one of 500 ms by default, which ends a
    /// call before a longer [`Config::timeout`]: make the connection with none
    /// (`AsyncConnectionConfig::new().set_response_timeout(None)`), or let
    /// [`AsyncRateLimiter::connect`] make it.
    pub fn shared(connection: C, config: Config) -> Result<Arc<Self>, Error> {
        Ok(Arc::new(Self::new(connection, config)?))
    }

    /// Sends `words` within the deadline.
    async fn send(&self, words: &[String]) -> Result<Value, Error> {
        let mut connection = self.connection.clone();
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, cmd(words).query_async(&mut connection)).await {
            Ok(reply) => reply.map_err(Error::from_redis),
            Err(_) => Err(Error::Timeout(timeout)),
        }
    }

    async fn decide(
        &self,
        limiters: &[Limiter],
        options: &Options,
        shadow: Option<bool>,
    ) -> Result<RateLimit, Error> {
        match self.policy.check(limiters, options, shadow)? {
            Step::Decided(decided) => Ok(decided),
            Step::Ask(call) => {
                let reply = self.send(call.words()).await;
                self.policy.checked(call, reply)
            }
        }
    }

    /// One request against every limiter, all or nothing, in one call.
    pub async fn check(&self, limiters: &[Limiter], options: Options) -> Result<RateLimit, Error> {
        self.decide(limiters, &options, None).await
    }

    /// [`AsyncRateLimiter::check`] with this call's shadow mode.
    pub async fn check_shadow(
        &self,
        limiters: &[Limiter],
        options: Options,
        shadow: bool,
    ) -> Result<RateLimit, Error> {
        self.decide(limiters, &options, Some(shadow)).await
    }

    /// What `check` would answer now, without writing (the `_RO` variants).
    pub async fn peek(&self, limiters: &[Limiter], quantity: u64) -> Result<RateLimit, Error> {
        let options = Options::new().quantity(quantity).read_only();
        self.decide(limiters, &options, None).await
    }

    /// Waits for a slot, as Guava's `tryAcquire(timeout)`: one call with `DELAY`, then a
    /// sleep of the wait the module gives; at once, refused, when the turn is further than
    /// `timeout` away. No polling: the module keeps the queue.
    pub async fn acquire(
        &self,
        limiters: &[Limiter],
        quantity: u64,
        timeout: Duration,
    ) -> Result<RateLimit, Error> {
        let options = Options::new().quantity(quantity).delay(timeout);
        let outcome = self.decide(limiters, &options, None).await?;
        if outcome.allowed && !outcome.wait.is_zero() {
            tokio::time::sleep(outcome.wait).await;
        }
        Ok(outcome)
    }

    async fn lease(&self, words: Vec<String>) -> Result<Lease, Error> {
        match self.policy.lease(words)? {
            Step::Decided(decided) => Ok(decided),
            Step::Ask(call) => {
                let reply = self.send(call.words()).await;
                self.policy.leased(call, reply)
            }
        }
    }

    async fn held(&self, words: Option<Vec<String>>, renewing: bool) -> Result<bool, Error> {
        match self.policy.hold(words, renewing)? {
            Step::Decided(decided) => Ok(decided),
            Step::Ask(call) => {
                let reply = self.send(call.words()).await;
                self.policy.held(call, reply, renewing)
            }
        }
    }

    /// `RL.ACQUIRE`: `quantity` of `limit` slots for `lease`; id 0 when refused, or when
    /// granted by [`crate::OnError::Allow`] while the server fails.
    pub async fn acquire_lease(
        &self,
        key: &str,
        limit: u64,
        lease: Duration,
        quantity: u64,
    ) -> Result<Lease, Error> {
        self.lease(lease_words(key, limit, lease, quantity, false)?)
            .await
    }

    /// `RL.ACQUIRE_RO`: what `acquire_lease` would answer, taking nothing.
    pub async fn peek_lease(
        &self,
        key: &str,
        limit: u64,
        lease: Duration,
        quantity: u64,
    ) -> Result<Lease, Error> {
        self.lease(lease_words(key, limit, lease, quantity, true)?)
            .await
    }

    /// `RL.RELEASE`: frees a lease at once; false when it was no longer held, or when the
    /// server was not reached (it ends at its expiry).
    pub async fn release_lease(&self, key: &str, id: i64) -> Result<bool, Error> {
        if id == 0 {
            return Ok(false); // granted without the server: nothing to free
        }
        self.held(Some(release_words(key, id)), false).await
    }

    /// `RL.RENEW`: extends a held lease to `lease` from now; while the server fails, true
    /// under Allow (keep working), false under Deny.
    pub async fn renew_lease(&self, key: &str, id: i64, lease: Duration) -> Result<bool, Error> {
        let words = if id == 0 {
            None
        } else {
            Some(renew_words(key, id, lease)?)
        };
        self.held(words, true).await
    }

    /// `RL.TOP` of one server: the keys refused most over the current and the previous
    /// minute (on a Cluster, use [`AsyncRateLimiter::top_of`] with each primary's
    /// connection).
    pub async fn top(&self, count: usize) -> Result<Vec<TopKey>, Error> {
        let reply = self.send(&top_words(count)).await?;
        Ok(top_keys(&[reply], count)?)
    }

    /// `RL.TOP` asked of every connection given (each primary of a Cluster), merged.
    pub async fn top_of(connections: &mut [C], count: usize) -> Result<Vec<TopKey>, Error> {
        let mut replies = Vec::new();
        let words = top_words(count);
        for connection in connections {
            let reply: Value = cmd(&words)
                .query_async(connection)
                .await
                .map_err(Error::from_redis)?;
            replies.push(reply);
        }
        Ok(top_keys(&replies, count)?)
    }

    /// Any command through the deadline (not the failure policy): the shared lists, the
    /// counts, a report.
    pub async fn call(&self, words: &[String]) -> Result<Value, Error> {
        self.send(words).await
    }

    /// Several commands on one key's node, in one transaction (`MULTI`/`EXEC`), within the
    /// deadline.
    pub async fn transaction(&self, commands: &[Vec<String>]) -> Result<Value, Error> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for words in commands {
            pipe.add_command(cmd(words));
        }
        let mut connection = self.connection.clone();
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, pipe.query_async(&mut connection)).await {
            Ok(reply) => reply.map_err(Error::from_redis),
            Err(_) => Err(Error::Timeout(timeout)),
        }
    }

    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// What a `FIXED`, `SLIDING` or `ANCHORED` window or a log counts
    /// (`RL.WINDOW.COUNTS`, `RL.LOG.COUNTS`), without writing.
    pub async fn counts(&self, limiter: &Limiter) -> Result<Counts, Error> {
        let words = counts_words(limiter)?;
        Ok(Counts::from_fields(
            limiter,
            &integers(&self.send(&words).await?)?,
        )?)
    }
}
