//! Everything around a call but the call itself, shared by the sync and async clients: the
//! deny cache before it, the circuit and `on_error` when it fails, and after it the metrics,
//! the cache and shadow mode (a refusal let through, counted and logged).

use std::fmt;
use std::time::{Duration, Instant};

use redis::Value;

use crate::protocol::{
    checked_words, result, validate, InvalidArgument, Lease, Limiter, Options, RateLimit, Shortfall,
};
use crate::resilience::{monotonic, Circuit, Clock, DenyCache, Error, OnError};

/// A step of a call before its I/O: decided without the server, or a call to make.
pub(crate) enum Step<T, C> {
    /// Decided without asking the server.
    Decided(T),
    /// Send the call's words, then hand the reply to the step that finishes it.
    Ask(C),
}

/// A call about to be sent: its words, and when it was asked (the server's time is timed).
pub(crate) struct Pending {
    words: Vec<String>,
    started: Instant,
}

impl Pending {
    fn new(words: Vec<String>) -> Self {
        Pending {
            words,
            started: Instant::now(),
        }
    }

    /// What to send.
    pub fn words(&self) -> &[String] {
        &self.words
    }
}

/// A check about to be sent: the request it decides, and its deny-cache key.
pub(crate) struct Check<'a> {
    words: Vec<String>,
    limiters: &'a [Limiter],
    options: &'a Options,
    shadow: Option<bool>,
    key: Option<String>,
    started: Instant,
}

impl Check<'_> {
    /// What to send.
    pub fn words(&self) -> &[String] {
        &self.words
    }
}

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

    /// Whether a client can work with it: a positive timeout and cool-down. A client's
    /// constructor checks it, so that no call is made with a deadline of zero.
    pub fn validate(&self) -> Result<(), InvalidArgument> {
        if self.timeout.is_zero() {
            return Err(InvalidArgument(
                "timeout is a positive duration, not zero".into(),
            ));
        }
        if self.cooldown.is_zero() {
            return Err(InvalidArgument(
                "cooldown is a positive duration, not zero".into(),
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("timeout", &self.timeout)
            .field("on_error", &self.on_error)
            .field("cooldown", &self.cooldown)
            .field("deny_cache", &self.deny_cache)
            .field("shadow", &self.shadow)
            .finish_non_exhaustive()
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

#[derive(Debug)]
pub(crate) struct Policy {
    pub circuit: Circuit,
    deny_cache: Option<DenyCache>,
    shadow: bool,
}

impl Policy {
    /// A client's policy: `config` validated.
    pub fn new(config: &Config) -> Result<Self, InvalidArgument> {
        config.validate()?;
        Ok(Policy {
            circuit: Circuit::new(config.on_error, config.cooldown, config.clock.clone()),
            deny_cache: (config.deny_cache > 0)
                .then(|| DenyCache::new(config.deny_cache, config.clock.clone())),
            shadow: config.shadow,
        })
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

    /// The first step of a check, before any I/O: the request validated (an error, and
    /// nothing sent, for what the module would refuse), then decided without the server when
    /// it can be (a standing refusal from the deny cache, or `on_error`'s while the circuit is
    /// open), else the call to make. The sync and async clients differ only in how they send
    /// it ([`Check::words`]) before [`Policy::checked`].
    pub fn check<'a>(
        &self,
        limiters: &'a [Limiter],
        options: &'a Options,
        shadow: Option<bool>,
    ) -> Result<Step<RateLimit, Check<'a>>, Error> {
        validate(limiters, options)?;
        let key = self
            .deny_cache
            .as_ref()
            .filter(|_| !options.refund && options.shortfall != Shortfall::Force)
            .map(|_| {
                let asked = Options {
                    quantity: 0,
                    ..*options
                };
                checked_words(limiters, &asked).join(" ")
            });
        if let (Some(cache), Some(key)) = (&self.deny_cache, &key) {
            if let Some(cached) = cache.get(key, options.quantity) {
                let refused = self.refused(limiters, cached, "deny_cache", shadow);
                return Ok(Step::Decided(refused));
            }
        }
        if self.circuit.open() {
            return Ok(Step::Decided(self.without_server(&policy_name(limiters))?));
        }
        Ok(Step::Ask(Check {
            words: checked_words(limiters, options),
            limiters,
            options,
            shadow,
            key,
            started: Instant::now(),
        }))
    }

    /// The last step of a check: the server's reply (or the failure to get one) decided,
    /// counted, cached and let through in shadow mode; a failure goes by `on_error`.
    pub fn checked(
        &self,
        call: Check<'_>,
        reply: Result<Value, Error>,
    ) -> Result<RateLimit, Error> {
        let reply = match reply {
            Ok(reply) => reply,
            Err(error) => return self.failed(error, call.limiters),
        };
        let decided = result(&reply, call.limiters, call.options)?;
        Ok(self.after(call, decided))
    }

    /// A call that failed: a server failure opens the circuit and `on_error` decides (or
    /// the error is returned); any other error is returned as it is.
    fn failed(&self, error: Error, limiters: &[Limiter]) -> Result<RateLimit, Error> {
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

    /// The server's decision: counted, cached, and let through in shadow mode.
    fn after(&self, call: Check<'_>, decided: RateLimit) -> RateLimit {
        self.answered(call.started.elapsed());
        // A request shed by load is a draw, not a standing refusal: never cached.
        if let (Some(cache), Some(key), 0) = (&self.deny_cache, call.key, decided.shed_level) {
            cache.put(key, call.options.quantity, &decided);
        }
        if !decided.allowed {
            let outcome = if decided.shed_level > 0 {
                "shed"
            } else {
                "refused"
            };
            return self.refused(call.limiters, decided, outcome, call.shadow);
        }
        let outcome = if decided.wait.is_zero() {
            "allowed"
        } else {
            "delayed"
        };
        self.count(&policy_name(call.limiters), outcome);
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
        tracing::info!(
            policy = %policy,
            keys = %keys.join(", "),
            "rate limiter: shadow: would refuse"
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

    /// The first step of `RL.ACQUIRE`: granted or refused by the policy while the circuit is
    /// open, else the call to make.
    pub fn lease(&self, words: Vec<String>) -> Result<Step<Lease, Pending>, Error> {
        if self.circuit.open() {
            let result = self.without_server(LEASE_POLICY)?;
            return Ok(Step::Decided(Lease { result, id: 0 }));
        }
        Ok(Step::Ask(Pending::new(words)))
    }

    /// The last step of `RL.ACQUIRE`: the reply read and counted, or the failure decided by
    /// the policy.
    pub fn leased(&self, call: Pending, reply: Result<Value, Error>) -> Result<Lease, Error> {
        let error = match reply {
            Ok(reply) => {
                self.answered(call.started.elapsed());
                let lease = Lease::from_reply(&reply)?;
                let outcome = if lease.allowed() {
                    "allowed"
                } else {
                    "refused"
                };
                self.count(LEASE_POLICY, outcome);
                return Ok(lease);
            }
            Err(error) => error,
        };
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

    /// The first step of a release or a renewal (`words`, `None` for a lease granted
    /// without the server): what the policy answers while the circuit is open or there is
    /// nothing to ask, else the call to make.
    pub fn hold(
        &self,
        words: Option<Vec<String>>,
        renewing: bool,
    ) -> Result<Step<bool, Pending>, Error> {
        match words.filter(|_| !self.circuit.open()) {
            Some(words) => Ok(Step::Ask(Pending::new(words))),
            None => Ok(Step::Decided(self.held_without_server(None, renewing)?)),
        }
    }

    /// The last step of a release or a renewal: whether the server still held the lease.
    pub fn held(
        &self,
        call: Pending,
        reply: Result<Value, Error>,
        renewing: bool,
    ) -> Result<bool, Error> {
        match reply {
            Ok(reply) => {
                self.answered(call.started.elapsed());
                Ok(matches!(reply, Value::Int(1)))
            }
            Err(error) => self.held_without_server(Some(error), renewing),
        }
    }

    /// A renewal or release the server did not answer (`error`) or was not asked (`None`:
    /// the circuit open): what the policy answers.
    fn held_without_server(&self, error: Option<Error>, renewing: bool) -> Result<bool, Error> {
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
