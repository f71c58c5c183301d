//! What every client sends and reads, with no I/O: the sync and async clients share it, and
//! `clients/conformance.json` pins it (the same table the Python, Node and Lua packages are
//! tested against).
//!
//! Times are asked of the module in milliseconds and given as [`Duration`]s; the HTTP fields
//! round them up, so a client that waits them is never early.

use std::fmt;
use std::time::Duration;

use redis::Value;

/// A `WINDOW` algorithm (`RL.WINDOW`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// Two windows on the clock, the previous one weighted (the default).
    Sliding,
    /// Windows on the clock.
    Fixed,
    /// A window from the key's first request, as `INCR` with `EXPIRE` counts.
    Anchored,
    /// A window of `n` buckets, each rolling off on its own.
    Buckets(u32),
}

impl Algorithm {
    fn push_words(self, words: &mut Vec<String>) {
        match self {
            Algorithm::Sliding => words.push("SLIDING".into()),
            Algorithm::Fixed => words.push("FIXED".into()),
            Algorithm::Anchored => words.push("ANCHORED".into()),
            Algorithm::Buckets(n) => words.extend(["BUCKETS".into(), n.to_string()]),
        }
    }
}

/// A priority class of graded limiting by load, most important first (Google's criticality).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Never shed before everything else is.
    CriticalPlus,
    /// Shed after the sheddable classes.
    Critical,
    /// Shed after `Sheddable`.
    SheddablePlus,
    /// Shed first (the default).
    #[default]
    Sheddable,
}

impl Priority {
    /// The four classes, most important first.
    pub const ALL: [Priority; 4] = [
        Priority::CriticalPlus,
        Priority::Critical,
        Priority::SheddablePlus,
        Priority::Sheddable,
    ];

    /// The class's name on the wire (`critical_plus` ... `sheddable`).
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::CriticalPlus => "critical_plus",
            Priority::Critical => "critical",
            Priority::SheddablePlus => "sheddable_plus",
            Priority::Sheddable => "sheddable",
        }
    }

    /// Its number, 0 (most important) to 3.
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// A name that is no priority class: [`Priority`]'s `FromStr` error. The caller chooses the
/// fallback (`name.parse().unwrap_or(Priority::Sheddable)`, as the other packages read an
/// `X-Priority` field).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownPriority(pub String);

impl fmt::Display for UnknownPriority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown priority {:?}: critical_plus, critical, sheddable_plus or sheddable",
            self.0
        )
    }
}

impl std::error::Error for UnknownPriority {}

impl std::str::FromStr for Priority {
    type Err = UnknownPriority;

    /// The class `name` names, in any case, spaces around it ignored.
    fn from_str(name: &str) -> Result<Priority, UnknownPriority> {
        Priority::ALL
            .into_iter()
            .find(|priority| priority.as_str().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| UnknownPriority(name.to_owned()))
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a limiter is: its command and parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// GCRA (`CL.THROTTLE`): `count` per `period`, in bursts of `max_burst + 1`; with
    /// `warmup`, a cold limiter reaches its rate over that much sustained use.
    Throttle {
        /// The bucket less one: `max_burst + 1` requests fit at once (redis-cell's name).
        max_burst: u64,
        /// Requests per `period`, the steady rate.
        count: u64,
        /// The period of `count`.
        period: Duration,
        /// The warm-up period (`WARMUP`), if any.
        warmup: Option<Duration>,
    },
    /// A window counter (`RL.WINDOW`): `limit` per `window`.
    Window {
        /// Requests per window.
        limit: u64,
        /// The window.
        window: Duration,
        /// How the window counts.
        algorithm: Algorithm,
    },
    /// An exact sliding log (`RL.LOG`): at most `limit` in any `window`.
    Log {
        /// Requests in any window.
        limit: u64,
        /// The window.
        window: Duration,
    },
    /// The load gate of a service (`LOAD priority` in `RL.ALL`): the level its instances'
    /// reports set admits a share of each priority class; a request it sheds is refused
    /// with nothing written ([`RateLimit::shed_level`]).
    Load {
        /// The request's class.
        priority: Priority,
    },
    /// A concurrency limit in `RL.ALL` (`LEASE limit lease`): at most `limit` leases held
    /// at once, each for `lease`, taken only if every other limiter admits; the result's
    /// [`RateLimit::lease_id`] releases or renews it.
    Lease {
        /// Leases held at once.
        limit: u64,
        /// How long a lease is held unless released or renewed.
        lease: Duration,
    },
}

/// An argument the module would refuse, or a builder used on a limiter it does not apply to:
/// found before any call ([`crate::Error::Invalid`]), so that no bad request reaches the server
/// or waits on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidArgument(pub String);

impl fmt::Display for InvalidArgument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid argument: {}", self.0)
    }
}

impl std::error::Error for InvalidArgument {}

fn invalid<T>(message: impl Into<String>) -> Result<T, InvalidArgument> {
    Err(InvalidArgument(message.into()))
}

/// `duration` is more than zero and fits the module's milliseconds.
fn positive(what: &str, duration: Duration) -> Result<(), InvalidArgument> {
    if duration.is_zero() {
        return invalid(format!("{what} is a positive duration, not zero"));
    }
    if rounded_millis(duration) > i64::MAX as u128 {
        return invalid(format!(
            "{what} of {duration:?} is longer than the module counts"
        ));
    }
    Ok(())
}

/// `value` is at least `least` and fits the module's 64-bit integers.
fn within(what: &str, value: u64, least: u64) -> Result<(), InvalidArgument> {
    if value < least {
        return invalid(format!("{what} is at least {least}, not {value}"));
    }
    if value > i64::MAX as u64 {
        return invalid(format!("{what} of {value} is more than the module counts"));
    }
    Ok(())
}

/// One limiter: a key, what limits it, and the name its policy has in the HTTP fields. Made
/// by its constructors ([`Limiter::rate`], [`Limiter::window`], ...); a check finds a bad
/// parameter or a builder that does not apply ([`Limiter::validate`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Limiter {
    /// The key the module keeps its state in (on a Cluster, the keys of one call share a
    /// hash slot: give them the same `{tag}`).
    pub key: String,
    /// The policy's name in the `RateLimit` fields.
    pub name: String,
    /// Its command and parameters.
    pub kind: Kind,
    /// A builder used where it does not apply (`.burst(0)`, `.algorithm(..)` on a rate).
    misuse: Option<String>,
}

impl Limiter {
    /// GCRA (`CL.THROTTLE`): `count` requests per `period`, one at a time; give it a bucket
    /// with [`Limiter::burst`] (named "burst").
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratelimit_module::Limiter;
    ///
    /// // 10 a second, up to 20 at once: redis-cell's `CL.THROTTLE key 19 10 1`.
    /// let limiter = Limiter::rate("user:7", 10, Duration::from_secs(1)).burst(20);
    /// assert_eq!(limiter, Limiter::throttle("user:7", 19, 10, Duration::from_secs(1)));
    /// ```
    pub fn rate(key: impl Into<String>, count: u64, period: Duration) -> Self {
        Limiter::throttle(key, 0, count, period)
    }

    /// GCRA with redis-cell's arguments, in its order: `count` per `period`, in bursts of
    /// `max_burst + 1` (named "burst"). [`Limiter::rate`] and [`Limiter::burst`] name them.
    pub fn throttle(key: impl Into<String>, max_burst: u64, count: u64, period: Duration) -> Self {
        Limiter {
            key: key.into(),
            name: "burst".into(),
            kind: Kind::Throttle {
                max_burst,
                count,
                period,
                warmup: None,
            },
            misuse: None,
        }
    }

    /// A sliding window counter: `limit` per `window` (named "window"); see
    /// [`Limiter::algorithm`].
    pub fn window(key: impl Into<String>, limit: u64, window: Duration) -> Self {
        Limiter {
            key: key.into(),
            name: "window".into(),
            kind: Kind::Window {
                limit,
                window,
                algorithm: Algorithm::Sliding,
            },
            misuse: None,
        }
    }

    /// An exact log: at most `limit` in any `window` (named "log").
    pub fn log(key: impl Into<String>, limit: u64, window: Duration) -> Self {
        Limiter {
            key: key.into(),
            name: "log".into(),
            kind: Kind::Log { limit, window },
            misuse: None,
        }
    }

    /// The load gate of the service whose key is `key`, for a request of `priority`.
    pub fn load(key: impl Into<String>, priority: Priority) -> Self {
        Limiter {
            key: key.into(),
            name: "load".into(),
            kind: Kind::Load { priority },
            misuse: None,
        }
    }

    /// A concurrency limit in `RL.ALL`: `limit` leases of `lease` at once (named "slots").
    pub fn slots(key: impl Into<String>, limit: u64, lease: Duration) -> Self {
        Limiter {
            key: key.into(),
            name: "slots".into(),
            kind: Kind::Lease { limit, lease },
            misuse: None,
        }
    }

    /// The same limiter under another policy name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// A window's algorithm. On any other limiter it is a mistake, which
    /// [`Limiter::validate`] (and so every call) reports.
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        match &mut self.kind {
            Kind::Window { algorithm: a, .. } => *a = algorithm,
            _ => self.misused(format!("algorithm({algorithm:?}) is a window's")),
        }
        self
    }

    /// A throttle's bucket: up to `requests` at once, at least 1. Zero, or a limiter other
    /// than a throttle, is a mistake that [`Limiter::validate`] reports.
    pub fn burst(mut self, requests: u64) -> Self {
        match &mut self.kind {
            Kind::Throttle { max_burst, .. } if requests > 0 => *max_burst = requests - 1,
            Kind::Throttle { .. } => self.misused("burst is at least 1 request, not 0".into()),
            _ => self.misused(format!("burst({requests}) is a throttle's")),
        }
        self
    }

    /// A throttle's warm-up, a positive duration. On any other limiter it is a mistake that
    /// [`Limiter::validate`] reports.
    pub fn warmup(mut self, warmup: Duration) -> Self {
        match &mut self.kind {
            Kind::Throttle { warmup: w, .. } => *w = Some(warmup),
            _ => self.misused(format!("warmup({warmup:?}) is a throttle's")),
        }
        self
    }

    /// Keeps the first mistake, naming the limiter it was made on.
    fn misused(&mut self, what: String) {
        let on = self.in_all().to_ascii_lowercase();
        self.misuse
            .get_or_insert_with(|| format!("{what}, and {:?} is a {on}", self.key));
    }

    /// Whether the module would take this limiter: a key, counts of at least 1, positive
    /// periods and windows, a policy name without `"` (it is quoted in the HTTP fields), and
    /// no builder used where it does not apply. Every call checks it before anything is sent.
    pub fn validate(&self) -> Result<(), InvalidArgument> {
        if let Some(misuse) = &self.misuse {
            return invalid(misuse.clone());
        }
        if self.key.is_empty() {
            return invalid("a limiter's key is a non-empty string");
        }
        if self.name.contains('"') {
            return invalid(format!("a policy's name has no '\"': {:?}", self.name));
        }
        match &self.kind {
            Kind::Throttle {
                max_burst,
                count,
                period,
                warmup,
            } => {
                within("max_burst", *max_burst, 0)?;
                within("count", *count, 1)?;
                positive("period", *period)?;
                if let Some(warmup) = warmup {
                    positive("warmup", *warmup)?;
                }
            }
            Kind::Window {
                limit,
                window,
                algorithm,
            } => {
                within("limit", *limit, 1)?;
                positive("window", *window)?;
                if let Algorithm::Buckets(n) = algorithm {
                    within("BUCKETS", u64::from(*n), 1)?;
                }
            }
            Kind::Log { limit, window } => {
                within("limit", *limit, 1)?;
                positive("window", *window)?;
            }
            Kind::Lease { limit, lease } => {
                within("limit", *limit, 1)?;
                positive("lease", *lease)?;
            }
            Kind::Load { .. } => {}
        }
        Ok(())
    }

    fn is_gate(&self) -> bool {
        matches!(self.kind, Kind::Load { .. })
    }

    /// Whether only `RL.ALL` takes it (a load gate, a lease).
    fn only_in_all(&self) -> bool {
        matches!(self.kind, Kind::Load { .. } | Kind::Lease { .. })
    }

    /// The command of this limiter alone.
    fn command(&self) -> &'static str {
        match self.kind {
            Kind::Throttle { .. } => "CL.THROTTLE",
            Kind::Window { .. } => "RL.WINDOW",
            Kind::Log { .. } => "RL.LOG",
            Kind::Load { .. } | Kind::Lease { .. } => "RL.ALL",
        }
    }

    /// Its word in `RL.ALL`.
    fn in_all(&self) -> &'static str {
        match self.kind {
            Kind::Throttle { .. } => "THROTTLE",
            Kind::Window { .. } => "WINDOW",
            Kind::Log { .. } => "LOG",
            Kind::Load { .. } => "LOAD",
            Kind::Lease { .. } => "LEASE",
        }
    }

    fn arguments(&self, words: &mut Vec<String>) {
        match &self.kind {
            Kind::Throttle {
                max_burst,
                count,
                period,
                ..
            } => words.extend([max_burst.to_string(), count.to_string(), millis(*period)]),
            Kind::Window { limit, window, .. } | Kind::Log { limit, window } => {
                words.extend([limit.to_string(), millis(*window)])
            }
            Kind::Load { priority } => words.push(priority.as_str().into()),
            Kind::Lease { limit, lease } => words.extend([limit.to_string(), millis(*lease)]),
        }
    }

    fn keywords(&self, words: &mut Vec<String>) {
        match &self.kind {
            Kind::Throttle {
                warmup: Some(warmup),
                ..
            } => words.extend(["WARMUP".into(), millis(*warmup)]),
            Kind::Window { algorithm, .. } => algorithm.push_words(words),
            _ => {}
        }
    }

    /// The window of its policy in the HTTP fields: how long an empty throttle takes to
    /// fill, a window's or a log's window.
    pub fn policy_window(&self) -> Duration {
        match &self.kind {
            Kind::Throttle {
                max_burst,
                count,
                period,
                ..
            } => {
                // In whole nanoseconds, rounded up (the fields round it up to seconds).
                let filled = period.as_nanos() * u128::from(*max_burst + 1);
                let count = u128::from((*count).max(1));
                Duration::from_nanos(filled.div_ceil(count).min(u64::MAX as u128) as u64)
            }
            Kind::Window { window, .. } | Kind::Log { window, .. } => *window,
            Kind::Lease { lease, .. } => *lease,
            Kind::Load { .. } => Duration::ZERO,
        }
    }
}

/// What a request that does not fit now does instead of being refused (at most one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Shortfall {
    /// Refused (the default).
    #[default]
    Refuse,
    /// `DELAY max_wait`: admitted with a wait for its turn, when its turn is within it.
    Delay(Duration),
    /// `AT_MOST`: take what fits, at least 1.
    AtMost,
    /// `FORCE`: take it all, owing what does not fit.
    Force,
}

/// A request's options (docs/options.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// How much the request counts (1).
    pub quantity: u64,
    /// Give `quantity` back instead of taking it.
    pub refund: bool,
    /// A refusal because the limit is used up keeps the key refused this long, after which
    /// it starts from none.
    pub block: Option<Duration>,
    /// What a request that does not fit does.
    pub shortfall: Shortfall,
    /// The `_RO` variant: what the call would answer, writing nothing.
    pub read_only: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            quantity: 1,
            refund: false,
            block: None,
            shortfall: Shortfall::Refuse,
            read_only: false,
        }
    }
}

impl Options {
    /// `quantity` 1 and nothing else.
    pub fn new() -> Self {
        Options::default()
    }

    /// The request counts `quantity`.
    pub fn quantity(mut self, quantity: u64) -> Self {
        self.quantity = quantity;
        self
    }

    /// Gives back instead of taking.
    pub fn refund(mut self) -> Self {
        self.refund = true;
        self
    }

    /// A penalty block after a refusal.
    pub fn block(mut self, duration: Duration) -> Self {
        self.block = Some(duration);
        self
    }

    /// Waits for its turn up to `max_wait` (`RateLimit::wait` says how long).
    pub fn delay(mut self, max_wait: Duration) -> Self {
        self.shortfall = Shortfall::Delay(max_wait);
        self
    }

    /// Takes what fits (`RateLimit::granted` says how much).
    pub fn at_most(mut self) -> Self {
        self.shortfall = Shortfall::AtMost;
        self
    }

    /// Takes it all, owing what does not fit.
    pub fn force(mut self) -> Self {
        self.shortfall = Shortfall::Force;
        self
    }

    /// Answers without writing.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    fn push_words(&self, words: &mut Vec<String>) {
        words.extend([self.quantity.to_string(), "MS".into()]);
        if let Some(block) = self.block {
            words.extend(["BLOCK".into(), millis(block)]);
        }
        match self.shortfall {
            Shortfall::Refuse => {}
            Shortfall::Delay(max_wait) => {
                words.extend(["DELAY".into(), rounded_millis(max_wait).to_string()])
            }
            Shortfall::AtMost => words.push("AT_MOST".into()),
            Shortfall::Force => words.push("FORCE".into()),
        }
        if self.refund {
            words.push("REFUND".into());
        }
    }

    fn has_sixth(&self) -> bool {
        matches!(self.shortfall, Shortfall::Delay(_) | Shortfall::AtMost)
    }

    /// Whether the module would take these options together: a quantity it counts, a
    /// positive block, no `REFUND` with a shortfall rule, and `BLOCK` with neither `DELAY`
    /// nor `FORCE` (combinations it refuses). Every call checks it before anything is sent.
    pub fn validate(&self) -> Result<(), InvalidArgument> {
        within("quantity", self.quantity, 0)?;
        if let Some(block) = self.block {
            positive("block", block)?;
            if matches!(self.shortfall, Shortfall::Delay(_) | Shortfall::Force) {
                return invalid("block takes neither delay nor force");
            }
        }
        if let Shortfall::Delay(max_wait) = self.shortfall {
            if rounded_millis(max_wait) > i64::MAX as u128 {
                return invalid(format!(
                    "a delay of {max_wait:?} is longer than the module counts"
                ));
            }
        }
        if self.refund && self.shortfall != Shortfall::Refuse {
            return invalid("refund takes none of delay, at_most and force");
        }
        Ok(())
    }
}

/// The redis crate's command of `words` (the name first).
pub(crate) fn cmd(words: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd(&words[0]);
    for word in &words[1..] {
        cmd.arg(word);
    }
    cmd
}

/// A duration as whole milliseconds, at least 1, as the module is asked.
pub fn millis(duration: Duration) -> String {
    rounded_millis(duration).max(1).to_string()
}

/// A duration in milliseconds, rounded to the nearest.
fn rounded_millis(duration: Duration) -> u128 {
    (duration.as_micros() + 500) / 1000
}

/// The most limiters one call takes (`RL.ALL`'s bound).
pub const MAX_LIMITERS: usize = 16;

/// Whether the module would take a request of `options` against `limiters`: one to
/// [`MAX_LIMITERS`] of them, each valid, at most one load gate, and options it takes.
pub fn validate(limiters: &[Limiter], options: &Options) -> Result<(), InvalidArgument> {
    if limiters.is_empty() {
        return invalid("at least one limiter");
    }
    if limiters.len() > MAX_LIMITERS {
        return invalid(format!(
            "at most {MAX_LIMITERS} limiters in one call, not {}",
            limiters.len()
        ));
    }
    if limiters.iter().filter(|one| one.is_gate()).count() > 1 {
        return invalid("at most one load gate in one call");
    }
    limiters.iter().try_for_each(Limiter::validate)?;
    options.validate()
}

/// The one command a request against `limiters` takes: the limiter's own, or `RL.ALL` with
/// `DETAILS` (several limiters, or a load gate). An error, and nothing to send, for what
/// [`validate`] refuses.
pub fn command_words(
    limiters: &[Limiter],
    options: &Options,
) -> Result<Vec<String>, InvalidArgument> {
    validate(limiters, options)?;
    Ok(checked_words(limiters, options))
}

/// [`command_words`] of a request already validated.
pub(crate) fn checked_words(limiters: &[Limiter], options: &Options) -> Vec<String> {
    let suffix = if options.read_only { "_RO" } else { "" };
    let mut words = Vec::with_capacity(16);
    match limiters {
        [one] if !one.only_in_all() => {
            words.extend([format!("{}{suffix}", one.command()), one.key.clone()]);
            one.arguments(&mut words);
            options.push_words(&mut words);
            one.keywords(&mut words);
        }
        _ => {
            words.extend([format!("RL.ALL{suffix}"), limiters.len().to_string()]);
            words.extend(limiters.iter().map(|one| one.key.clone()));
            for one in limiters {
                words.push(one.in_all().into());
                one.arguments(&mut words);
                one.keywords(&mut words);
            }
            options.push_words(&mut words);
            words.push("DETAILS".into());
        }
    }
    words
}

/// What every limiter command answers, typed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RateLimit {
    /// Admitted (and counted); false: refused, and not counted.
    pub allowed: bool,
    /// The most admitted at once.
    pub limit: i64,
    /// How much more would be admitted right now.
    pub remaining: i64,
    /// Until a refused request fits; `None` when admitted, or never at this quantity.
    pub retry_after: Option<Duration>,
    /// Until the limiter is back to full capacity.
    pub reset_after: Duration,
    /// With `DELAY`: how long to wait before going ahead (zero: at once, or refused).
    pub wait: Duration,
    /// With `AT_MOST`: the quantity granted (0 when refused).
    pub granted: Option<u64>,
    /// Decided without the server, by `on_error` (nothing counted, no fields to send).
    pub failed: bool,
    /// Refused, but let through in shadow mode (`allowed` is then true).
    pub shadow: bool,
    /// With a load gate: the level that shed the request (answer 503, not 429); 0 if not shed.
    pub shed_level: i64,
    /// With a `LEASE` limiter: the lease's id, for releasing or renewing it on each of its
    /// keys (0 when refused).
    pub lease_id: i64,
    /// Several limiters: each one's own result, in the order given (empty for one).
    pub each: Vec<RateLimit>,
}

impl RateLimit {
    /// Reads `[limited, limit, remaining, retry_after, reset_after]`, times in ms.
    pub fn from_fields(fields: &[i64]) -> Option<RateLimit> {
        let [limited, limit, remaining, retry_after, reset_after, ..] = *fields else {
            return None;
        };
        Some(RateLimit {
            allowed: limited == 0,
            limit,
            remaining,
            retry_after: (retry_after >= 0).then(|| Duration::from_millis(retry_after as u64)),
            reset_after: Duration::from_millis(reset_after.max(0) as u64),
            ..RateLimit::default()
        })
    }

    /// What `on_error` decides without the server: admitted or refused, nothing counted; a
    /// refusal's `retry_after` is when the server is asked again.
    pub fn failure(allowed: bool, retry_after: Duration) -> RateLimit {
        RateLimit {
            allowed,
            retry_after: (!allowed).then_some(retry_after),
            failed: true,
            ..RateLimit::default()
        }
    }
}

/// A reply the client did not expect (not the module's shape).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnexpectedReply(pub String);

impl fmt::Display for UnexpectedReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unexpected reply from the server: {}", self.0)
    }
}

impl std::error::Error for UnexpectedReply {}

fn integer(value: &Value) -> Result<i64, UnexpectedReply> {
    match value {
        Value::Int(n) => Ok(*n),
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| UnexpectedReply(format!("{value:?}"))),
        Value::SimpleString(text) => text
            .parse()
            .map_err(|_| UnexpectedReply(format!("{value:?}"))),
        other => Err(UnexpectedReply(format!("{other:?}"))),
    }
}

fn items(value: &Value) -> Result<&[Value], UnexpectedReply> {
    match value {
        Value::Array(items) | Value::Set(items) => Ok(items),
        other => Err(UnexpectedReply(format!("{other:?}"))),
    }
}

/// The integers of a flat array reply.
pub fn integers(value: &Value) -> Result<Vec<i64>, UnexpectedReply> {
    items(value)?.iter().map(integer).collect()
}

/// The typed result of [`command_words`]'s reply: the five integers, the sixth (a wait, a
/// quantity granted), then with a load gate the level that shed the request, then each
/// limiter's own (`DETAILS`).
pub fn result(
    reply: &Value,
    limiters: &[Limiter],
    options: &Options,
) -> Result<RateLimit, UnexpectedReply> {
    let items = items(reply)?;
    let head: Vec<i64> = items
        .iter()
        .take_while(|item| !matches!(item, Value::Array(_)))
        .map(integer)
        .collect::<Result<_, _>>()?;
    let mut outcome =
        RateLimit::from_fields(&head).ok_or_else(|| UnexpectedReply(format!("{reply:?}")))?;
    let mut next = 5;
    let leased = limiters
        .iter()
        .any(|one| matches!(one.kind, Kind::Lease { .. }));
    if options.has_sixth() || leased {
        let sixth = *head
            .get(next)
            .ok_or_else(|| UnexpectedReply(format!("{reply:?}")))?;
        next += 1;
        match options.shortfall {
            _ if leased => outcome.lease_id = sixth,
            Shortfall::Delay(_) => outcome.wait = Duration::from_millis(sixth.max(0) as u64),
            _ => outcome.granted = Some(sixth.max(0) as u64),
        }
    }
    if limiters.iter().any(Limiter::is_gate) {
        outcome.shed_level = *head
            .get(next)
            .ok_or_else(|| UnexpectedReply(format!("{reply:?}")))?;
    }
    if limiters.len() > 1 || limiters.iter().any(Limiter::only_in_all) {
        let details = &items[head.len()..];
        for (detail, limiter) in details.iter().zip(limiters) {
            if limiter.is_gate() {
                continue;
            }
            let fields = integers(detail)?;
            outcome.each.push(
                RateLimit::from_fields(&fields)
                    .ok_or_else(|| UnexpectedReply(format!("{detail:?}")))?,
            );
        }
        if limiters.len() == 1 {
            outcome.each.clear();
        }
    }
    Ok(outcome)
}

/// `RL.ACQUIRE` (or `RL.ACQUIRE_RO`, which takes nothing): `quantity` of `limit` slots for
/// `lease`; an error for a key, limit, lease or quantity the module would refuse.
pub fn lease_words(
    key: &str,
    limit: u64,
    lease: Duration,
    quantity: u64,
    read_only: bool,
) -> Result<Vec<String>, InvalidArgument> {
    Limiter::slots(key, limit, lease).validate()?;
    within("quantity", quantity, 0)?;
    let name = if read_only {
        "RL.ACQUIRE_RO"
    } else {
        "RL.ACQUIRE"
    };
    Ok(vec![
        name.into(),
        key.into(),
        limit.to_string(),
        millis(lease),
        quantity.to_string(),
        "MS".into(),
    ])
}

/// `RL.RELEASE`: frees a held lease.
pub fn release_words(key: &str, id: i64) -> Vec<String> {
    vec!["RL.RELEASE".into(), key.into(), id.to_string()]
}

/// `RL.RENEW`: extends a held lease to `lease` from now; an error for a lease that is not
/// a positive duration.
pub fn renew_words(key: &str, id: i64, lease: Duration) -> Result<Vec<String>, InvalidArgument> {
    positive("lease", lease)?;
    Ok(vec![
        "RL.RENEW".into(),
        key.into(),
        id.to_string(),
        millis(lease),
        "MS".into(),
    ])
}

/// `RL.TOP count`: the `count` keys refused most.
pub fn top_words(count: usize) -> Vec<String> {
    vec!["RL.TOP".into(), count.to_string()]
}

/// `RL.ACQUIRE`'s answer: the five fields, and the lease's id (0 when refused, or granted
/// without the server).
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    /// The five fields.
    pub result: RateLimit,
    /// What releases or renews it.
    pub id: i64,
}

impl Lease {
    /// Whether the lease was granted.
    pub fn allowed(&self) -> bool {
        self.result.allowed
    }

    /// Reads `RL.ACQUIRE`'s reply.
    pub fn from_reply(reply: &Value) -> Result<Lease, UnexpectedReply> {
        let fields = integers(reply)?;
        match (RateLimit::from_fields(&fields), fields.get(5)) {
            (Some(result), Some(&id)) => Ok(Lease { result, id }),
            _ => Err(UnexpectedReply(format!("{reply:?}"))),
        }
    }
}

/// One of `RL.TOP`'s keys: refused `refusals` times over the current and the previous
/// minute, overcounted by at most `error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopKey {
    /// The key.
    pub key: String,
    /// Its refusals.
    pub refusals: i64,
    /// The most they are overcounted by.
    pub error: i64,
}

/// `RL.TOP`'s replies from every primary, merged: a key lives on one primary, so its rows
/// are summed only while a slot moves. Most refused first, ties by key.
pub fn top_keys(replies: &[Value], count: usize) -> Result<Vec<TopKey>, UnexpectedReply> {
    let mut merged: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for reply in replies {
        for row in items(reply)? {
            let row = items(row)?;
            let [key, refusals, error] = row else {
                return Err(UnexpectedReply(format!("{row:?}")));
            };
            let key = match key {
                Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                Value::SimpleString(text) => text.clone(),
                other => return Err(UnexpectedReply(format!("{other:?}"))),
            };
            let entry = merged.entry(key).or_default();
            entry.0 += integer(refusals)?;
            entry.1 += integer(error)?;
        }
    }
    let mut rows: Vec<TopKey> = merged
        .into_iter()
        .map(|(key, (refusals, error))| TopKey {
            key,
            refusals,
            error,
        })
        .collect();
    rows.sort_by(|a, b| b.refusals.cmp(&a.refusals).then_with(|| a.key.cmp(&b.key)));
    rows.truncate(count);
    Ok(rows)
}

/// What a window or a log counts, without writing (times in the module's milliseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counts {
    /// `RL.WINDOW.COUNTS`: the previous window's count (`SLIDING`; 0 otherwise) and how long
    /// it still weighs, the current one's and how long it still counts.
    Window {
        /// The previous window's count (`SLIDING`; 0 otherwise).
        previous: i64,
        /// How long the previous window still weighs.
        previous_ends_in: Duration,
        /// The current window's count.
        current: i64,
        /// How long the current window still counts.
        current_ends_in: Duration,
    },
    /// `RL.LOG.COUNTS`: the units in the window, until the oldest leaves it and until the
    /// newest does (the log's reset).
    Log {
        /// The units in the window.
        count: i64,
        /// Until the oldest leaves the window.
        oldest_ends_in: Duration,
        /// Until the newest does (the log's reset).
        newest_ends_in: Duration,
    },
}

impl Counts {
    /// Reads the counts reply of `limiter`.
    pub fn from_fields(limiter: &Limiter, fields: &[i64]) -> Result<Counts, UnexpectedReply> {
        let ms = |value: i64| Duration::from_millis(value.max(0) as u64);
        match (&limiter.kind, fields) {
            (Kind::Log { .. }, [count, oldest, newest, ..]) => Ok(Counts::Log {
                count: *count,
                oldest_ends_in: ms(*oldest),
                newest_ends_in: ms(*newest),
            }),
            (Kind::Window { .. }, [previous, previous_ends, current, current_ends, ..]) => {
                Ok(Counts::Window {
                    previous: *previous,
                    previous_ends_in: ms(*previous_ends),
                    current: *current,
                    current_ends_in: ms(*current_ends),
                })
            }
            _ => Err(UnexpectedReply(format!("{fields:?}"))),
        }
    }
}

/// `RL.WINDOW.COUNTS` or `RL.LOG.COUNTS` for a `FIXED`, `SLIDING` or `ANCHORED` window or a
/// log; an error for another limiter.
pub fn counts_words(limiter: &Limiter) -> Result<Vec<String>, InvalidArgument> {
    limiter.validate()?;
    match &limiter.kind {
        Kind::Log { window, .. } => Ok(vec![
            "RL.LOG.COUNTS".into(),
            limiter.key.clone(),
            millis(*window),
            "MS".into(),
        ]),
        Kind::Window {
            window,
            algorithm: algorithm @ (Algorithm::Fixed | Algorithm::Sliding | Algorithm::Anchored),
            ..
        } => {
            let mut words = vec![
                "RL.WINDOW.COUNTS".into(),
                limiter.key.clone(),
                millis(*window),
            ];
            algorithm.push_words(&mut words);
            words.push("MS".into());
            Ok(words)
        }
        _ => invalid("counts are read from a FIXED, SLIDING or ANCHORED window, or a log"),
    }
}

/// A service's level and what it admits, as a load report answers: the share of each
/// priority class, most important first, from 0 to 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadStanding {
    /// The level (0: nothing shed).
    pub level: i64,
    /// The instances reporting.
    pub instances: i64,
    /// The share admitted of each class, most important first.
    pub shares: [f64; 4],
}

impl LoadStanding {
    /// The share the level admits of `priority`.
    pub fn share(&self, priority: Priority) -> f64 {
        self.shares[priority.index()]
    }

    /// Reads `RL.LOAD.REPORT`'s reply: `[level, instances, share x 4]`.
    pub fn from_reply(reply: &Value) -> Result<LoadStanding, UnexpectedReply> {
        let items = items(reply)?;
        let float = |value: &Value| -> Result<f64, UnexpectedReply> {
            match value {
                Value::BulkString(bytes) => {
                    std::str::from_utf8(bytes).ok().and_then(|t| t.parse().ok())
                }
                Value::SimpleString(text) => text.parse().ok(),
                Value::Double(x) => Some(*x),
                Value::Int(n) => Some(*n as f64),
                _ => None,
            }
            .ok_or_else(|| UnexpectedReply(format!("{value:?}")))
        };
        if items.len() < 6 {
            return Err(UnexpectedReply(format!("{reply:?}")));
        }
        Ok(LoadStanding {
            level: integer(&items[0])?,
            instances: integer(&items[1])?,
            shares: [
                float(&items[2])?,
                float(&items[3])?,
                float(&items[4])?,
                float(&items[5])?,
            ],
        })
    }
}

/// `RL.LOAD.REPORT`: an instance's factors, counting for `ttl`.
pub fn report_words(
    service: &str,
    instance: &str,
    ttl: Duration,
    factors: &[(String, f64)],
) -> Vec<String> {
    let mut words = vec![
        "RL.LOAD.REPORT".into(),
        service.into(),
        instance.into(),
        millis(ttl),
    ];
    for (name, value) in factors {
        // Finite and not negative, as the module takes it.
        let value = if value.is_finite() {
            value.clamp(0.0, 1e15)
        } else {
            0.0
        };
        words.extend([name.clone(), format_factor(value)]);
    }
    words
}

/// Six significant digits, as the other packages write a factor.
fn format_factor(value: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    let digits = 6 - 1 - value.abs().log10().floor() as i32;
    let text = format!("{:.*}", digits.max(0) as usize, value);
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_are_written_with_six_significant_digits() {
        assert_eq!(format_factor(0.25), "0.25");
        assert_eq!(format_factor(3.0), "3");
        assert_eq!(format_factor(0.123456789), "0.123457");
        assert_eq!(format_factor(1234.5678), "1234.57");
    }

    #[test]
    fn priorities_read_as_the_other_packages_read_them() {
        assert_eq!("critical_plus".parse(), Ok(Priority::CriticalPlus));
        assert_eq!(" Critical ".parse(), Ok(Priority::Critical));
        let unknown = "whatever".parse::<Priority>().unwrap_err();
        assert_eq!(unknown, UnknownPriority("whatever".into()));
        assert!(unknown
            .to_string()
            .starts_with("unknown priority \"whatever\""));
    }
}
