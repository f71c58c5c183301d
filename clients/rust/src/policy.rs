//! Everything around a call but the call itself, shared by the sync and async clients: the
//! deny cache before it, the circuit and `on_error` when it fails, and after it the metrics,
//! the cache and shadow mode (a refusal let through, counted and logged).

use std::time::Duration;

use crate::protocol::{command_words, Lease, Limiter, Options, RateLimit};
use crate::resilience::{monotonic, Circuit, Clock, DenyCache, Error, OnError};

/// How a client behaves around its calls: every field has a default ([`Config::default`]).
#[derive(Clone)]
pub struct Config {
    /// The most a call waits (1 s). A connection's own response timeout, when shorter, ends
    /// a call first: [`crate::AsyncRateLimiter::connect`] makes one without.
    pub timeout: Duration,
    /// What a call decides when the server fails ([`OnError::Raise`]).
    pub on_error: OnError,
    /// How long after a failure calls decide by `on_error` without asking (1 s).
    pub cooldown: Duration,
    /// Standing refusals answered locally, at most this many keys (0: none).
    pub deny_cache: usize,
    /// Refused requests let through, counted as "shadow" and logged.
    pub shadow: bool,
    /// The clock of the circuit and the deny cache.
    pub clock: Clock,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            timeout: Duration::from_secs(1),
            on_error: OnError::Raise,
            cooldown: Duration::from_secs(1),
            deny_cache: 0,
            shadow: false,
            clock: monotonic(),
        }
    }
}

impl Config {
    /// The most a call waits.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What a call decides when the server fails.
    pub fn on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// How long after a failure calls decide without asking.
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// Answers up to `keys` standing refusals locally.
    pub fn deny_cache(mut self, keys: usize) -> Self {
        self.deny_cache = keys;
        self
    }

    /// Shadow mode.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// Another clock (tests).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }
}

/// What lease decisions are counted under in the metrics.
const LEASE_POLICY: &str = "lease";

/// The policy name a decision is counted under: the limiters' names, joined by "+".
pub fn policy_name(limiters: &[Limiter]) -> String {
    limiters
        .iter()
        .map(|one| one.name.as_str())
        .collect::<Vec<_>>()
        .join("+")
}

pub(crate) struct Policy {
    pub circuit: Circuit,
    deny_cache: Option<DenyCache>,
    shadow: bool,
}

impl Policy {
    pub fn new(config: &Config) -> Self {
        Policy {
            circuit: Circuit::new(config.on_error, config.cooldown, config.clock.clone()),
            deny_cache: (config.deny_cache > 0)
                .then(|| DenyCache::new(config.deny_cache, config.clock.clone())),
            shadow: config.shadow,
        }
    }

    pub fn count(&self, policy: &str, outcome: &'static str) {
        metrics::counter!(
            "ratelimit_decisions_total",
            "policy" => policy.to_owned(),
            "outcome" => outcome
        )
        .increment(1);
    }

    /// The server answered a call after `elapsed`: timed, and the circuit closes.
    pub fn answered(&self, elapsed: Duration) {
        self.circuit.succeeded();
        metrics::histogram!("ratelimit_server_call_duration_seconds").record(elapsed.as_secs_f64());
    }

    /// The call's cache key, and its decision if taken without the server: a standing
    /// refusal from the deny cache, or `on_error`'s while the circuit is open.
    pub fn before(
        &self,
        limiters: &[Limiter],
        options: &Options,
        shadow: Option<bool>,
    ) -> Result<(Option<String>, Option<RateLimit>), Error> {
        let key = self
            .deny_cache
            .as_ref()
            .filter(|_| !options.refund && options.shortfall != crate::protocol::Shortfall::Force)
            .map(|_| {
                command_words(
                    limiters,
                    &Options {
                        quantity: 0,
                        ..*options
                    },
                )
                .join(" ")
            });
        if let (Some(cache), Some(key)) = (&self.deny_cache, &key) {
            if let Some(cached) = cache.get(key, options.quantity) {
                return Ok((
                    None,
                    Some(self.refused(limiters, cached, "deny_cache", shadow)),
                ));
            }
        }
        if self.circuit.open() {
            return Ok((key, Some(self.without_server(&policy_name(limiters))?)));
        }
        Ok((key, None))
    }

    /// A call that failed: a server failure opens the circuit and `on_error` decides (or
    /// the error is returned); any other error is returned as it is.
    pub fn failed(&self, error: Error, limiters: &[Limiter]) -> Result<RateLimit, Error> {
        if !error.is_server_failure() {
            self.circuit.succeeded(); // the server answered: the call was wrong
            return Err(error);
        }
        self.circuit.failed(&error);
        if self.circuit.on_error() == OnError::Raise {
            return Err(error);
        }
        self.without_server(&policy_name(limiters))
    }

    /// The server's decision, taken `elapsed` after asking: counted, cached, and let
    /// through in shadow mode.
    pub fn after(
        &self,
        key: Option<String>,
        limiters: &[Limiter],
        options: &Options,
        decided: RateLimit,
        elapsed: Duration,
        shadow: Option<bool>,
    ) -> RateLimit {
        self.answered(elapsed);
        // A request shed by load is a draw, not a standing refusal: never cached.
        if let (Some(cache), Some(key), 0) = (&self.deny_cache, key, decided.shed_level) {
            cache.put(key, options.quantity, &decided);
        }
        if !decided.allowed {
            let outcome = if decided.shed_level > 0 {
                "shed"
            } else {
                "refused"
            };
            return self.refused(limiters, decided, outcome, shadow);
        }
        let outcome = if decided.wait.is_zero() {
            "allowed"
        } else {
            "delayed"
        };
        self.count(&policy_name(limiters), outcome);
        decided
    }

    fn without_server(&self, policy: &str) -> Result<RateLimit, Error> {
        let decided = self.circuit.decide()?;
        let outcome = if decided.allowed {
            "failed_open"
        } else {
            "failed_closed"
        };
        self.count(policy, outcome);
        Ok(decided)
    }

    fn refused(
        &self,
        limiters: &[Limiter],
        decided: RateLimit,
        outcome: &'static str,
        shadow: Option<bool>,
    ) -> RateLimit {
        let policy = policy_name(limiters);
        if !shadow.unwrap_or(self.shadow) {
            self.count(&policy, outcome);
            return decided;
        }
        self.count(&policy, "shadow");
        let keys: Vec<&str> = limiters.iter().map(|one| one.key.as_str()).collect();
        eprintln!(
            "rate limiter: shadow: {policy} would refuse {}",
            keys.join(", ")
        );
        RateLimit {
            allowed: true,
            shadow: true,
            ..decided
        }
    }

    // Leases follow the same policy: while the server fails, `on_error` decides whether a
    // lease is granted (id 0, `failed`: nothing to release), and whether a held one may be
    // kept (a renewal answers true under Allow, false under Deny); a release that did not
    // reach the server answers false (the lease ends at its expiry anyway).

    pub fn lease_before(&self) -> Result<Option<Lease>, Error> {
        if !self.circuit.open() {
            return Ok(None);
        }
        let result = self.without_server(LEASE_POLICY)?;
        Ok(Some(Lease { result, id: 0 }))
    }

    pub fn lease_failed(&self, error: Error) -> Result<Lease, Error> {
        if !error.is_server_failure() {
            self.circuit.succeeded();
            return Err(error);
        }
        self.circuit.failed(&error);
        if self.circuit.on_error() == OnError::Raise {
            return Err(error);
        }
        let result = self.without_server(LEASE_POLICY)?;
        Ok(Lease { result, id: 0 })
    }

    pub fn lease_after(&self, lease: Lease, elapsed: Duration) -> Lease {
        self.answered(elapsed);
        let outcome = if lease.allowed() {
            "allowed"
        } else {
            "refused"
        };
        self.count(LEASE_POLICY, outcome);
        lease
    }

    /// A renewal or release the server did not answer (`error`) or was not asked (`None`:
    /// the circuit open): what the policy answers.
    pub fn held_without_server(&self, error: Option<Error>, renewing: bool) -> Result<bool, Error> {
        match error {
            Some(error) if !error.is_server_failure() => {
                self.circuit.succeeded();
                return Err(error);
            }
            Some(error) => {
                self.circuit.failed(&error);
                if self.circuit.on_error() == OnError::Raise {
                    return Err(error);
                }
            }
            None => {
                self.circuit.decide()?;
            }
        }
        Ok(renewing && self.circuit.on_error() == OnError::Allow)
    }
}
