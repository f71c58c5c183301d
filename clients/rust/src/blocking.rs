//! The synchronous client, over the redis crate's blocking connections (`Connection`,
//! `cluster::ClusterConnection`).

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use redis::{ConnectionLike, Value};

use crate::policy::{Config, Policy, Step};
use crate::protocol::{
    cmd, counts_words, integers, lease_words, release_words, renew_words, top_keys, top_words,
    Counts, Lease, Limiter, Options, RateLimit, TopKey,
};
use crate::resilience::Error;

/// A blocking connection whose reads and writes can be bounded: a call then waits at most
/// the client's timeout for each.
pub trait BlockingConnection: ConnectionLike + Send {
    /// Bounds every read and write of the connection.
    fn bound(&mut self, timeout: Duration) -> redis::RedisResult<()>;
}

impl BlockingConnection for redis::Connection {
    fn bound(&mut self, timeout: Duration) -> redis::RedisResult<()> {
        self.set_read_timeout(Some(timeout))?;
        self.set_write_timeout(Some(timeout))
    }
}

#[cfg(feature = "cluster")]
impl BlockingConnection for redis::cluster::ClusterConnection {
    fn bound(&mut self, timeout: Duration) -> redis::RedisResult<()> {
        self.set_read_timeout(Some(timeout))?;
        self.set_write_timeout(Some(timeout))
    }
}

/// Every command of the module on one blocking connection, with typed results; the calls
/// of several threads take turns on it. Every read and write waits at most
/// [`Config::timeout`] (the connection's own timeouts, set here); the failure policy, the
/// deny cache, shadow mode and the metrics are the async client's.
pub struct RateLimiter<C> {
    connection: Mutex<C>,
    policy: Policy,
}

impl<C> fmt::Debug for RateLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<C: BlockingConnection> RateLimiter<C> {
    /// A limiter over `connection` with `config`; sets the connection's timeouts. An error
    /// for a config no client can work with ([`Config::validate`]).
    pub fn new(mut connection: C, config: Config) -> Result<Self, Error> {
        let policy = Policy::new(&config)?;
        connection
            .bound(config.timeout)
            .map_err(Error::from_redis)?;
        Ok(RateLimiter {
            connection: Mutex::new(connection),
            policy,
        })
    }

    fn send(&self, words: &[String]) -> Result<Value, Error> {
        let mut connection = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        cmd(words)
            .query(&mut *connection)
            .map_err(Error::from_redis)
    }

    fn decide(
        &self,
        limiters: &[Limiter],
        options: &Options,
        shadow: Option<bool>,
    ) -> Result<RateLimit, Error> {
        match self.policy.check(limiters, options, shadow)? {
            Step::Decided(decided) => Ok(decided),
            Step::Ask(call) => {
                let reply = self.send(call.words());
                self.policy.checked(call, reply)
            }
        }
    }

    /// One request against every limiter, all or nothing, in one call.
    pub fn check(&self, limiters: &[Limiter], options: Options) -> Result<RateLimit, Error> {
        self.decide(limiters, &options, None)
    }

    /// What `check` would answer now, without writing (the `_RO` variants).
    pub fn peek(&self, limiters: &[Limiter], quantity: u64) -> Result<RateLimit, Error> {
        let options = Options::new().quantity(quantity).read_only();
        self.decide(limiters, &options, None)
    }

    /// Waits for a slot: one call with `DELAY`, then a sleep of the wait the module gives;
    /// at once, refused, when the turn is further than `timeout` away.
    pub fn acquire(
        &self,
        limiters: &[Limiter],
        quantity: u64,
        timeout: Duration,
    ) -> Result<RateLimit, Error> {
        let options = Options::new().quantity(quantity).delay(timeout);
        let outcome = self.decide(limiters, &options, None)?;
        if outcome.allowed && !outcome.wait.is_zero() {
            std::thread::sleep(outcome.wait);
        }
        Ok(outcome)
    }

    fn lease(&self, words: Vec<String>) -> Result<Lease, Error> {
        match self.policy.lease(words)? {
            Step::Decided(decided) => Ok(decided),
            Step::Ask(call) => {
                let reply = self.send(call.words());
                self.policy.leased(call, reply)
            }
        }
    }

    fn held(&self, words: Option<Vec<String>>, renewing: bool) -> Result<bool, Error> {
        match self.policy.hold(words, renewing)? {
            Step::Decided(decided) => Ok(decided),
            Step::Ask(call) => {
                let reply = self.send(call.words());
                self.policy.held(call, reply, renewing)
            }
        }
    }

    /// `RL.ACQUIRE`: `quantity` of `limit` slots for `lease` (see the async client).
    pub fn acquire_lease(
        &self,
        key: &str,
        limit: u64,
        lease: Duration,
        quantity: u64,
    ) -> Result<Lease, Error> {
        self.lease(lease_words(key, limit, lease, quantity, false)?)
    }

    /// `RL.ACQUIRE_RO`: what `acquire_lease` would answer, taking nothing.
    pub fn peek_lease(
        &self,
        key: &str,
        limit: u64,
        lease: Duration,
        quantity: u64,
    ) -> Result<Lease, Error> {
        self.lease(lease_words(key, limit, lease, quantity, true)?)
    }

    /// `RL.RELEASE`: frees a lease at once; false when it was no longer held, or not reached.
    pub fn release_lease(&self, key: &str, id: i64) -> Result<bool, Error> {
        if id == 0 {
            return Ok(false);
        }
        self.held(Some(release_words(key, id)), false)
    }

    /// `RL.RENEW`: extends a held lease to `lease` from now (while the server fails: true
    /// under Allow, false under Deny).
    pub fn renew_lease(&self, key: &str, id: i64, lease: Duration) -> Result<bool, Error> {
        let words = if id == 0 {
            None
        } else {
            Some(renew_words(key, id, lease)?)
        };
        self.held(words, true)
    }

    /// What a `FIXED`, `SLIDING` or `ANCHORED` window or a log counts, without writing.
    pub fn counts(&self, limiter: &Limiter) -> Result<Counts, Error> {
        let words = counts_words(limiter)?;
        Ok(Counts::from_fields(
            limiter,
            &integers(&self.send(&words)?)?,
        )?)
    }

    /// `RL.TOP` of the server the connection reaches.
    pub fn top(&self, count: usize) -> Result<Vec<TopKey>, Error> {
        let reply = self.send(&top_words(count))?;
        Ok(top_keys(&[reply], count)?)
    }

    /// Any command on the connection (not through the failure policy).
    pub fn call(&self, words: &[String]) -> Result<Value, Error> {
        self.send(words)
    }

    /// Several commands on one key's node in one transaction (`MULTI`/`EXEC`); on a
    /// Cluster, the redis crate's blocking connection has no pipelines: use the async
    /// client there (an error otherwise).
    pub fn transaction(&self, commands: &[Vec<String>]) -> Result<Value, Error> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for words in commands {
            pipe.add_command(cmd(words));
        }
        let mut connection = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        pipe.query(&mut *connection).map_err(Error::from_redis)
    }

    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }
}
