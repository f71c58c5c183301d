//! What the clients do when the server fails, and under a flood, with no I/O: the sync and
//! async clients share it, and its clock is injected (tests drive it).
//!
//! - [`Circuit`]: after a failed call, decide by [`OnError`] without asking the server for a
//!   cool-down, so that a dead server costs one timeout per cool-down, not one per request;
//!   then one call (the probe) asks the server while the others keep deciding by `OnError`,
//!   until the probe's answer closes the circuit or its failure opens it again.
//! - [`DenyCache`]: a refusal with a `retry_after` is answered locally until then, for the
//!   same command and a quantity not smaller; bounded, least recently used out.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::{InvalidArgument, RateLimit, UnexpectedReply};

/// A monotonic clock: the time since some fixed instant. Injected in tests.
pub type Clock = Arc<dyn Fn() -> Duration + Send + Sync>;

/// The monotonic clock of the process.
pub fn monotonic() -> Clock {
    let origin = Instant::now();
    Arc::new(move || origin.elapsed())
}

/// What a call decides when the server fails (cannot be reached, times out, is loading or
/// failing over, or its Cluster is down).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnError {
    /// The error is returned (the default, as the redis crate does).
    #[default]
    Raise,
    /// Admitted ([`RateLimit::failed`], nothing counted).
    Allow,
    /// Refused, with `retry_after` the time until the server is asked again.
    Deny,
}

/// What the redis crate reported, kept whole as the [`source`](std::error::Error::source)
/// of an [`Error`]: its own type is not part of this crate's API.
#[derive(Debug)]
pub struct Failure(redis::RedisError);

impl Failure {
    /// The server's error code, when the server answered an error (`WRONGTYPE`, `ERR`,
    /// `LOADING`...).
    pub fn code(&self) -> Option<&str> {
        self.0.code()
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why a call has no decision.
#[derive(Debug)]
pub enum Error {
    /// The server failed (with [`OnError::Raise`]).
    Server(Failure),
    /// The server did not answer within the client's deadline (with [`OnError::Raise`]).
    Timeout(Duration),
    /// The circuit is open: the server failed less than a cool-down ago (with
    /// [`OnError::Raise`]); `retry_after` is when it is asked again.
    Unavailable {
        /// Until the server is asked again.
        retry_after: Duration,
        /// The failure that opened the circuit.
        last: String,
    },
    /// The server refused the call itself (a bad argument, a key of another type).
    Refused(Failure),
    /// The reply was not the module's.
    Unexpected(UnexpectedReply),
    /// A bad argument, found before any call (nothing was sent).
    Invalid(InvalidArgument),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Server(error) => write!(f, "the server failed: {error}"),
            Error::Timeout(after) => write!(f, "no answer within {after:?}"),
            Error::Unavailable { retry_after, last } => write!(
                f,
                "the server failed less than a cool-down ago ({last}); asked again in {retry_after:?}"
            ),
            Error::Refused(error) => write!(f, "{error}"),
            Error::Unexpected(error) => write!(f, "{error}"),
            Error::Invalid(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Server(failure) | Error::Refused(failure) => Some(&failure.0),
            Error::Unexpected(error) => Some(error),
            Error::Invalid(error) => Some(error),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(error: redis::RedisError) -> Self {
        Error::from_redis(error)
    }
}

impl From<InvalidArgument> for Error {
    fn from(error: InvalidArgument) -> Self {
        Error::Invalid(error)
    }
}

impl From<UnexpectedReply> for Error {
    fn from(error: UnexpectedReply) -> Self {
        Error::Unexpected(error)
    }
}

impl Error {
    /// Whether the server failed, as opposed to refusing a bad call: by the error's kind,
    /// never its text.
    pub fn is_server_failure(&self) -> bool {
        match self {
            Error::Server(_) | Error::Timeout(_) | Error::Unavailable { .. } => true,
            Error::Refused(_) | Error::Unexpected(_) | Error::Invalid(_) => false,
        }
    }

    /// A redis crate error, classed: a failure of the server, or a refusal of the call.
    pub(crate) fn from_redis(error: redis::RedisError) -> Error {
        if server_failed(&error) {
            Error::Server(Failure(error))
        } else {
            Error::Refused(Failure(error))
        }
    }
}

/// Whether a redis crate error means the server failed (unreachable, dropped, timed out,
/// loading, read-only after a failover, its Cluster down or busy), by its kind.
pub(crate) fn server_failed(error: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    if error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_io_error()
    {
        return true;
    }
    match error.kind() {
        ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => true,
        ErrorKind::Server(kind) => matches!(
            kind,
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
        ),
        ErrorKind::Extension => error.code() == Some("BUSY"),
        _ => false,
    }
}

#[derive(Debug)]
struct CircuitState {
    /// No call asks before then (`None`: closed).
    open_until: Option<Duration>,
    /// Half-open: a probe is out until then.
    probe_until: Duration,
    logged_at: Option<Duration>,
    last_error: String,
}

/// The failure policy of one client.
pub struct Circuit {
    on_error: OnError,
    cooldown: Duration,
    clock: Clock,
    state: Mutex<CircuitState>,
}

impl fmt::Debug for Circuit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Circuit")
            .field("on_error", &self.on_error)
            .field("cooldown", &self.cooldown)
            .finish_non_exhaustive()
    }
}

impl Circuit {
    /// A closed circuit.
    pub fn new(on_error: OnError, cooldown: Duration, clock: Clock) -> Self {
        Circuit {
            on_error,
            cooldown,
            clock,
            state: Mutex::new(CircuitState {
                open_until: None,
                probe_until: Duration::ZERO,
                logged_at: None,
                last_error: String::new(),
            }),
        }
    }

    /// The policy.
    pub fn on_error(&self) -> OnError {
        self.on_error
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CircuitState> {
        // A panic elsewhere while holding it leaves plain data: still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether this call decides without asking: within a cool-down after a failure, or
    /// while another call probes the server. A call told `false` asks (after a failure, it
    /// is the probe); a probe that never reports back stops counting after a cool-down.
    pub fn open(&self) -> bool {
        let mut state = self.lock();
        let Some(open_until) = state.open_until else {
            return false;
        };
        let now = (self.clock)();
        if now < open_until || now < state.probe_until {
            return true;
        }
        state.probe_until = now + self.cooldown;
        false
    }

    /// The server answered: the circuit closes.
    pub fn succeeded(&self) {
        let mut state = self.lock();
        if state.open_until.is_some() {
            state.open_until = None;
            state.probe_until = Duration::ZERO;
        }
    }

    /// A failed call: opens for a cool-down; logged at most once a second (a `tracing`
    /// warning).
    pub fn failed(&self, error: &dyn fmt::Display) {
        let now = (self.clock)();
        let mut state = self.lock();
        state.open_until = Some(now + self.cooldown);
        state.last_error = error.to_string();
        if state
            .logged_at
            .is_none_or(|at| now.saturating_sub(at) >= Duration::from_secs(1))
        {
            state.logged_at = Some(now);
            tracing::warn!(
                error = %error,
                on_error = ?self.on_error,
                cooldown = ?self.cooldown,
                "rate limiter: the server failed; deciding by on_error for the cool-down"
            );
        }
    }

    /// Until the server is asked again (or the probe out has its answer).
    pub fn retry_after(&self) -> Duration {
        let now = (self.clock)();
        let state = self.lock();
        let until = state.open_until.unwrap_or_default().max(state.probe_until);
        until.saturating_sub(now)
    }

    /// The decision without the server while open; the error under [`OnError::Raise`].
    pub fn decide(&self) -> Result<RateLimit, Error> {
        match self.on_error {
            OnError::Raise => Err(Error::Unavailable {
                retry_after: self.retry_after(),
                last: self.lock().last_error.clone(),
            }),
            OnError::Allow => Ok(RateLimit::failure(true, self.retry_after())),
            OnError::Deny => Ok(RateLimit::failure(false, self.retry_after())),
        }
    }
}

struct Cached {
    until: Duration,
    quantity: u64,
    result: RateLimit,
    cached_at: Duration,
}

/// Refusals answered locally while they stand: at most `max_keys`, the least recently used
/// out. It only ever refuses what the server refused, never for longer than it said.
pub struct DenyCache {
    max_keys: usize,
    clock: Clock,
    // Key -> refusal, and the keys from least to most recently used.
    entries: Mutex<(HashMap<String, Cached>, VecDeque<String>)>,
}

impl fmt::Debug for DenyCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenyCache")
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

impl DenyCache {
    /// An empty cache of at most `max_keys` (at least 1).
    pub fn new(max_keys: usize, clock: Clock) -> Self {
        DenyCache {
            max_keys: max_keys.max(1),
            clock,
            entries: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    /// The standing refusal of `key` if `quantity` is not smaller than the refused one's,
    /// with the time that passed taken off its times.
    pub fn get(&self, key: &str, quantity: u64) -> Option<RateLimit> {
        let now = (self.clock)();
        let mut guard = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (map, order) = &mut *guard;
        let entry = map.get(key)?;
        if now >= entry.until {
            map.remove(key);
            order.retain(|one| one != key);
            return None;
        }
        if quantity < entry.quantity {
            return None;
        }
        let aged = aged(&entry.result, now - entry.cached_at, entry.until - now);
        if let Some(at) = order.iter().position(|one| one == key) {
            let moved = order.remove(at).expect("a position of the deque");
            order.push_back(moved);
        }
        Some(aged)
    }

    /// Caches `result` if it is a refusal with a `retry_after`.
    pub fn put(&self, key: String, quantity: u64, result: &RateLimit) {
        let Some(retry_after) = result
            .retry_after
            .filter(|r| !result.allowed && !r.is_zero())
        else {
            return;
        };
        let now = (self.clock)();
        let mut guard = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (map, order) = &mut *guard;
        order.retain(|one| *one != key);
        order.push_back(key.clone());
        map.insert(
            key,
            Cached {
                until: now + retry_after,
                quantity,
                result: result.clone(),
                cached_at: now,
            },
        );
        while map.len() > self.max_keys {
            let Some(oldest) = order.pop_front() else {
                break;
            };
            map.remove(&oldest);
        }
    }
}

fn aged(result: &RateLimit, elapsed: Duration, retry_after: Duration) -> RateLimit {
    let age = |one: &RateLimit| RateLimit {
        reset_after: one.reset_after.saturating_sub(elapsed),
        retry_after: one.retry_after.map(|r| r.saturating_sub(elapsed)),
        ..one.clone()
    };
    RateLimit {
        retry_after: Some(retry_after),
        each: result.each.iter().map(age).collect(),
        ..age(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn clock() -> (Arc<AtomicU64>, Clock) {
        let now = Arc::new(AtomicU64::new(0));
        let read = now.clone();
        (
            now,
            Arc::new(move || Duration::from_millis(read.load(Ordering::SeqCst))),
        )
    }

    #[test]
    fn after_the_cool_down_one_call_probes_and_the_others_keep_the_policy() {
        let (now, clock) = clock();
        let circuit = Circuit::new(OnError::Deny, Duration::from_secs(1), clock);
        assert!(!circuit.open());
        circuit.failed(&"gone");
        now.store(500, Ordering::SeqCst);
        assert!(circuit.open());
        now.store(1_000, Ordering::SeqCst);
        assert!(!circuit.open(), "the probe asks");
        assert!(circuit.open() && circuit.open(), "the others do not");
        assert_eq!(circuit.retry_after(), Duration::from_secs(1));
        // The probe fails: another cool-down, then one probe again.
        now.store(1_200, Ordering::SeqCst);
        circuit.failed(&"still gone");
        now.store(2_200, Ordering::SeqCst);
        assert_eq!((circuit.open(), circuit.open()), (false, true));
        // It answers: closed, every call asks.
        circuit.succeeded();
        assert_eq!((circuit.open(), circuit.open()), (false, false));
        // A probe that never reports back stops counting after a cool-down.
        circuit.failed(&"gone");
        now.store(3_200, Ordering::SeqCst);
        assert_eq!((circuit.open(), circuit.open()), (false, true));
        now.store(4_200, Ordering::SeqCst);
        assert!(!circuit.open());
        let decided = circuit.decide().unwrap();
        assert!(!decided.allowed && decided.failed);
    }

    #[test]
    fn the_deny_cache_refuses_only_what_the_server_refused_and_never_longer() {
        let (now, clock) = clock();
        let cache = DenyCache::new(2, clock);
        let refused = RateLimit {
            allowed: false,
            limit: 5,
            retry_after: Some(Duration::from_millis(300)),
            reset_after: Duration::from_secs(1),
            ..RateLimit::default()
        };
        cache.put("a".into(), 2, &refused);
        now.store(100, Ordering::SeqCst);
        let answer = cache.get("a", 2).unwrap();
        assert_eq!(answer.retry_after, Some(Duration::from_millis(200)));
        assert_eq!(answer.reset_after, Duration::from_millis(900));
        assert!(cache.get("a", 1).is_none(), "a smaller quantity asks");
        // Least recently used out.
        cache.put("b".into(), 1, &refused);
        cache.get("a", 2);
        cache.put("c".into(), 1, &refused);
        assert!(cache.get("b", 1).is_none() && cache.get("a", 2).is_some());
        now.store(300, Ordering::SeqCst);
        assert!(
            cache.get("a", 2).is_none(),
            "never longer than the server said"
        );
        cache.put("d".into(), 1, &RateLimit::default());
        assert!(cache.get("d", 1).is_none(), "an admission is never cached");
    }
}
