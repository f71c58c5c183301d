//! The grammar every limiting command shares after its own required arguments:
//!
//! ```text
//! [quantity] [unit] [keyword ...]
//! ```
//!
//! `quantity` (default 1) is the first optional argument when present; the unit, `S`
//! (seconds, the default), `MS` or `US`, sets the unit of the command's period or window, of
//! every duration an option takes and of the reply's times. Keywords follow, in any order,
//! each at most once, in any letter case: the shared options, and a command's own (`RL.WINDOW`'s
//! algorithms, `CL.THROTTLE`'s `WARMUP`, `RL.ALL`'s `DETAILS`).
//!
//! Each shared option is declared once, in [`OPTIONS`]: its keyword and the duration it takes,
//! its place in the usage line, the options it cannot be combined with, the calls that refuse
//! it, what it does to the [`Request`], what it checks against the call's limiters, the reply's
//! sixth field it fills, and the `INFO` counter of the calls it changes. Everything else
//! follows from that table: the parser ([`parse_options`]), the refusals ([`refuse`]), the
//! argument specs of `COMMAND DOCS` and the usage lines ([`limiting_args!`], [`SHARED_ARGS`]),
//! the counters ([`CommonOptions::outcome`]) and the sixth field
//! ([`CommonOptions::sixth_field`]). The redis-cell form of `CL.THROTTLE` has no keyword, so
//! it keeps its meaning.

use crate::core::engine::Settled;
use crate::core::limiter::Limiter;
use crate::core::params;
use crate::core::request::{Action, Request, Shortfall};
use crate::core::time::{Micros, Rounding, Unit};
use crate::error::CommandError;
use crate::options::{integer_argument, parse_integer, Keyword, Tail};
use crate::redis::call::Outcome;
use crate::redis::registration::{Arg, ArgKind};

/// A shared option, by its place in [`OPTIONS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shared {
    Block,
    Delay,
    AtMost,
    Force,
    Refund,
}

/// A call, or a limiter of it, that refuses some of the shared options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refuser {
    /// A read-only `_RO` variant, which never writes.
    ReadOnly,
    /// A call with a `LEASE` limiter.
    Lease,
    /// A call with a `LOAD` gate.
    Load,
    /// `RL.ACQUIRE`, whose usage names none of the shared options: it refuses every one,
    /// with a syntax error unless the option declares a reply of its own
    /// ([`CommonOptions::refuse_every`]).
    Acquire,
}

/// The usage line's bracket an option is written in: the options of one group are
/// alternatives (`[DELAY max_wait|AT_MOST|FORCE]`), and the groups follow each other in the
/// order of [`Group::ALL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    Block,
    Shortfall,
    Refund,
}

impl Group {
    /// In the order of the usage line. `REFUND` is last, so that a read-only variant's
    /// arguments are its writing command's without the last ([`without_refund`]).
    const ALL: [Group; 3] = [Group::Block, Group::Shortfall, Group::Refund];

    /// Its argument spec, for `COMMAND DOCS`: its only option, or a choice of its options.
    const fn arg(self) -> Arg {
        match self {
            Group::Shortfall => Arg::one_of(c"shortfall", &SHORTFALL_ALTERNATIVES).optional(),
            group => only_member(group).optional(),
        }
    }
}

/// The duration an option takes, in the call's unit.
#[derive(Clone, Copy, Debug)]
struct Duration {
    /// Its name in the usage line.
    name: &'static std::ffi::CStr,
    /// The least value it may be.
    least: i64,
    /// The reply when it is not an integer of at least `least`.
    invalid: CommandError,
    /// The reply when it is longer than a span can be.
    too_long: CommandError,
}

/// A shared option: everything the commands do with it, declared once.
pub(super) struct SharedOption {
    /// How it is written, and its token in `COMMAND DOCS`.
    token: &'static std::ffi::CStr,
    /// The duration it takes, if any.
    duration: Option<Duration>,
    /// Its bracket in the usage line.
    group: Group,
    /// The options declared before it that it cannot be combined with, each with its reply.
    conflicts: &'static [(Shared, CommandError)],
    /// The calls that refuse it, each with its reply.
    refused_by: &'static [(Refuser, CommandError)],
    /// What it does to the request, given its duration (zero for an option without one).
    sets: fn(&mut Request, Micros),
    /// What it checks of the request against each of the call's limiters, if anything.
    checks: Option<Check>,
    /// The reply's sixth field it fills from what the engine settled, in the call's unit.
    sixth_field: Option<fn(&Settled, Unit) -> i64>,
    /// The counter of the calls it changes: the outcome, and whether a call (its request,
    /// whether it was refused, what the engine settled) is one.
    counted: Option<(Outcome, Counts)>,
}

/// A check of a call's request against one of its limiters.
type Check = fn(&Request, &Limiter) -> Result<(), CommandError>;

/// Whether a call is one an option's counter counts: given its request, whether it was
/// refused, and what the engine settled.
type Counts = fn(&Request, bool, &Settled) -> bool;

const fn message(text: &'static std::ffi::CStr) -> CommandError {
    CommandError::Message(text)
}

/// RL.ACQUIRE's reply to a choice of what a take that does not fit does.
const ACQUIRE_WAITS_NOT: CommandError = message(
    c"ERR RL.ACQUIRE takes no DELAY, AT_MOST or FORCE: a lease is held whole until released, so wait for RL.RELEASE and retry",
);

/// The shared options, in the order of [`Shared`] and of the usage line.
pub(super) const OPTIONS: [SharedOption; 5] = [
    // `BLOCK duration`: a refusal because the limit is used up keeps the key refused for
    // `duration`.
    SharedOption {
        token: c"BLOCK",
        duration: Some(Duration {
            name: c"duration",
            least: 1,
            invalid: message(c"ERR BLOCK must be a positive integer"),
            too_long: message(c"ERR BLOCK is too long: the limit is 2^63 nanoseconds (292 years)"),
        }),
        group: Group::Block,
        conflicts: &[],
        refused_by: &[
            (Refuser::Lease, message(c"ERR LEASE and BLOCK cannot be combined: a lease is refused only while its slots are held")),
        ],
        sets: |request, duration| request.block = Some(duration),
        checks: None,
        sixth_field: None,
        counted: None,
    },
    // `DELAY max_wait`: a take that does not fit now waits for it, at most `max_wait`.
    SharedOption {
        token: c"DELAY",
        duration: Some(Duration {
            name: c"max_wait",
            least: 0,
            invalid: message(c"ERR DELAY must be an integer of at least 0"),
            too_long: message(c"ERR DELAY is too long: the limit is 2^63 nanoseconds (292 years)"),
        }),
        group: Group::Shortfall,
        conflicts: &[(
            Shared::Block,
            message(c"ERR DELAY and BLOCK cannot be combined: a request that may wait is not refused for a penalty"),
        )],
        refused_by: &[
            (Refuser::Lease, message(c"ERR LEASE and DELAY cannot be combined: a lease is taken now or not at all, so wait for RL.RELEASE and retry")),
            (Refuser::Load, message(c"ERR LOAD and DELAY cannot be combined: a request shed by load retries after retry_after")),
            (Refuser::Acquire, ACQUIRE_WAITS_NOT),
        ],
        sets: |request, max_wait| request.shortfall = Shortfall::Delay(max_wait),
        checks: None,
        // The wait before going ahead, rounded up; 0 at once or when refused.
        sixth_field: Some(|settled, unit| settled.wait.ticks().in_units(unit, Rounding::Up)),
        counted: Some((Outcome::Delayed, |request, limited, settled| {
            request.quantity > 0 && !limited && settled.wait > Micros::ZERO
        })),
    },
    // `AT_MOST`: a take that does not fit now takes what fits, at least 1.
    SharedOption {
        token: c"AT_MOST",
        duration: None,
        group: Group::Shortfall,
        conflicts: &[(
            Shared::Delay,
            message(c"ERR DELAY and AT_MOST cannot be combined: a request waits for all of its quantity or takes part of it now"),
        )],
        refused_by: &[
            (Refuser::Lease, message(c"ERR LEASE and AT_MOST cannot be combined: a lease holds the slots it asks for or none")),
            (Refuser::Load, message(c"ERR LOAD and AT_MOST cannot be combined: the load gate admits a request or sheds it")),
            (Refuser::Acquire, ACQUIRE_WAITS_NOT),
        ],
        sets: |request, _| request.shortfall = Shortfall::AtMost,
        checks: None,
        // The quantity granted.
        sixth_field: Some(|settled, _| settled.granted as i64),
        counted: Some((Outcome::AtMost, |request, limited, settled| {
            request.quantity > 0 && !limited && settled.granted < request.quantity
        })),
    },
    // `FORCE`: a take that does not fit now is taken whole, the rest owed.
    SharedOption {
        token: c"FORCE",
        duration: None,
        group: Group::Shortfall,
        conflicts: &[
            (Shared::Block, message(c"ERR FORCE and BLOCK cannot be combined: a forced request is never refused")),
            (Shared::Delay, message(c"ERR DELAY and FORCE cannot be combined: a forced request never waits")),
            (
                Shared::AtMost,
                message(c"ERR AT_MOST and FORCE cannot be combined: a request takes part of its quantity or owes the rest"),
            ),
        ],
        refused_by: &[
            (Refuser::Lease, message(c"ERR LEASE and FORCE cannot be combined: a lease never holds more slots than its limit")),
            (Refuser::Load, message(c"ERR LOAD and FORCE cannot be combined: a request shed by load is never forced")),
            (Refuser::Acquire, ACQUIRE_WAITS_NOT),
        ],
        sets: |request, _| request.shortfall = Shortfall::Force,
        // Each limiter is charged at most 16 times its limit.
        checks: Some(|request, limiter| Ok(params::force_quantity(request.quantity, limiter.limit())?)),
        sixth_field: None,
        counted: Some((Outcome::Forced, |request, limited, settled| {
            request.quantity > 0 && !limited && settled.forced
        })),
    },
    // `REFUND`: give `quantity` back instead of taking it.
    SharedOption {
        token: c"REFUND",
        duration: None,
        group: Group::Refund,
        conflicts: &[
            (Shared::Block, message(c"ERR REFUND and BLOCK cannot be combined: a refund is never refused")),
            (Shared::Delay, message(c"ERR REFUND and DELAY cannot be combined: a refund is never refused")),
            (Shared::AtMost, message(c"ERR REFUND and AT_MOST cannot be combined: a refund is never refused")),
            (Shared::Force, message(c"ERR REFUND and FORCE cannot be combined: a refund is never refused")),
        ],
        refused_by: &[
            (Refuser::ReadOnly, message(c"ERR REFUND is not allowed in a read-only dry run (the _RO variants never write)")),
            (Refuser::Lease, message(c"ERR LEASE and REFUND cannot be combined: give a lease back with RL.RELEASE key id")),
        ],
        sets: |request, _| request.action = Action::Refund,
        checks: None,
        sixth_field: None,
        counted: Some((Outcome::Refund, |_, _, _| true)),
    },
];

impl Shared {
    /// Every shared option, in the order of [`OPTIONS`].
    const ALL: [Shared; OPTIONS.len()] = [
        Shared::Block,
        Shared::Delay,
        Shared::AtMost,
        Shared::Force,
        Shared::Refund,
    ];

    /// Its declaration.
    fn option(self) -> &'static SharedOption {
        &OPTIONS[self as usize]
    }

    /// The option written `keyword`.
    fn written(keyword: Keyword) -> Option<Shared> {
        Shared::ALL
            .into_iter()
            .find(|&shared| KEYWORDS[shared as usize] == keyword)
    }
}

/// Each option's keyword, read from its token once.
const KEYWORDS: [Keyword; OPTIONS.len()] = {
    let mut keywords = [Keyword::S; OPTIONS.len()];
    let mut at = 0;
    while at < OPTIONS.len() {
        keywords[at] = Keyword::from_token(OPTIONS[at].token);
        at += 1;
    }
    keywords
};

/// The shared options a call gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Given(u8);

impl Given {
    /// Whether `option` is one of them.
    pub(super) fn has(self, option: Shared) -> bool {
        self.0 & 1 << option as u8 != 0
    }

    /// Whether none was given.
    pub(super) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Adds `option`; false when it was given already.
    fn insert(&mut self, option: Shared) -> bool {
        let new = !self.has(option);
        self.0 |= 1 << option as u8;
        new
    }

    /// The given options, in the order of [`OPTIONS`].
    fn shared(self) -> impl Iterator<Item = Shared> {
        Shared::ALL
            .into_iter()
            .filter(move |option| self.has(*option))
    }

    /// The given options' declarations, in the order of [`OPTIONS`].
    fn options(self) -> impl Iterator<Item = &'static SharedOption> {
        self.shared().map(Shared::option)
    }
}

/// What a call's optional arguments ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CommonOptions {
    /// The unit of the period or window argument, of every duration, and of the reply's
    /// times.
    pub unit: Unit,
    /// What the call asks of its limiters: the quantity (0 is a peek), then what each given
    /// option set.
    pub request: Request,
    /// The shared options given.
    pub given: Given,
}

impl Default for CommonOptions {
    fn default() -> Self {
        CommonOptions {
            unit: Unit::Seconds,
            request: Request::take(1),
            given: Given::default(),
        }
    }
}

impl CommonOptions {
    /// Refuses the options the calls or limiters `refusers` names cannot take, with the first
    /// given option's reply (in the order of [`OPTIONS`]).
    pub(super) fn refuse(&self, refusers: impl Fn(Refuser) -> bool) -> Result<(), CommandError> {
        for option in self.given.options() {
            if let Some(&(_, reply)) = option.refused_by.iter().find(|(by, _)| refusers(*by)) {
                return Err(reply);
            }
        }
        Ok(())
    }

    /// Refuses any given option, as a call whose usage names none does: with the reply the
    /// option declares for `refuser`, or a syntax error.
    pub(super) fn refuse_every(&self, refuser: Refuser) -> Result<(), CommandError> {
        self.refuse(|by| by == refuser)?;
        match self.given.is_empty() {
            true => Ok(()),
            false => Err(CommandError::Syntax),
        }
    }

    /// Checks the request against each of `limiters`, as each given option requires.
    pub(super) fn check(&self, limiters: &[Limiter]) -> Result<(), CommandError> {
        for option in self.given.options() {
            if let Some(checks) = option.checks {
                for limiter in limiters {
                    checks(&self.request, limiter)?;
                }
            }
        }
        Ok(())
    }

    /// How a call ended, for the counters, given whether it was refused and what the
    /// engine settled: the counter of the first given option that counts it, or else a
    /// peek, a refusal or an admission.
    pub(super) fn outcome(&self, limited: bool, settled: &Settled) -> Outcome {
        let counted = self.given.options().find_map(|option| {
            let (outcome, counts) = option.counted?;
            counts(&self.request, limited, settled).then_some(outcome)
        });
        counted.unwrap_or(match (self.request.quantity, limited) {
            (0, _) => Outcome::Peek,
            (_, true) => Outcome::Limited,
            (_, false) => Outcome::Allowed,
        })
    }

    /// The reply's sixth field that a given option fills, in the call's unit.
    pub(super) fn sixth_field(&self, settled: &Settled) -> Option<i64> {
        if self.given.is_empty() {
            return None;
        }
        (self.given.options())
            .find_map(|option| option.sixth_field)
            .map(|field| field(settled, self.unit))
    }
}

/// Parses the optional arguments `tail`. `command_keyword` is offered every keyword that is
/// not the unit or a shared option; it returns `Ok(true)` when it took it (and the values it
/// read from the `Tail`). A keyword out of place, repeated, or unknown is a syntax error (the
/// reply names the command's usage).
pub(super) fn parse_options<'a>(
    tail: &'a [&'a [u8]],
    mut command_keyword: impl FnMut(Keyword, &mut Tail<'a>) -> Result<bool, CommandError>,
) -> Result<CommonOptions, CommandError> {
    let mut quantity = 1;
    let mut unit = None;
    let mut given = Given::default();
    let mut durations = [0; OPTIONS.len()];
    let mut tail = Tail::new(tail);
    while let Some(arg) = tail.next_argument() {
        // No keyword starts like a number: a quantity is recognised before any comparison.
        if tail.read() == 1 && looks_numeric(arg) {
            quantity = parse_quantity(arg)?;
            continue;
        }
        let keyword = Keyword::read(arg).ok_or(CommandError::Syntax)?;
        if let Some(given_unit) = keyword.unit() {
            if unit.replace(given_unit).is_some() {
                return Err(CommandError::Syntax);
            }
        } else if let Some(shared) = Shared::written(keyword) {
            if let Some(duration) = &shared.option().duration {
                let value = tail.next_argument().ok_or(CommandError::Syntax)?;
                durations[shared as usize] = parse_integer(value)
                    .filter(|&value| value >= duration.least)
                    .ok_or(duration.invalid)?;
            }
            if !given.insert(shared) {
                return Err(CommandError::Syntax);
            }
        } else if !command_keyword(keyword, &mut tail)? {
            return Err(CommandError::Syntax);
        }
    }
    let unit = unit.unwrap_or(Unit::Seconds);
    let mut request = Request::take(quantity);
    if given.is_empty() {
        return Ok(CommonOptions {
            unit,
            request,
            given,
        });
    }
    for shared in given.shared() {
        let option = shared.option();
        if let Some(&(_, reply)) = (option.conflicts.iter()).find(|(other, _)| given.has(*other)) {
            return Err(reply);
        }
        let duration = match &option.duration {
            Some(duration) => (unit.span(durations[shared as usize])).ok_or(duration.too_long)?,
            None => Micros::ZERO,
        };
        (option.sets)(&mut request, duration);
    }
    Ok(CommonOptions {
        unit,
        request,
        given,
    })
}

/// Whether `arg` was meant as a number (a quantity) rather than a mistyped keyword.
fn looks_numeric(arg: &[u8]) -> bool {
    arg.first()
        .is_some_and(|&first| first.is_ascii_digit() || first == b'-' || first == b'+')
}

fn parse_quantity(arg: &[u8]) -> Result<u64, CommandError> {
    let quantity = integer_argument(arg, c"ERR quantity is not an integer or out of range")?;
    u64::try_from(quantity).map_err(|_| CommandError::Message(c"ERR quantity must not be negative"))
}

/// `quantity`, for `COMMAND DOCS`.
pub(super) const QUANTITY_ARG: Arg = Arg::new(c"quantity", ArgKind::Integer).optional();

/// The unit keyword all commands accept.
pub(super) const UNIT_ARG: Arg = Arg::one_of(
    c"unit",
    &[Arg::token(c"S"), Arg::token(c"MS"), Arg::token(c"US")],
)
.optional();

/// One option's spec: its token, and the duration it takes after it.
const fn option_arg(option: &SharedOption) -> Arg {
    match &option.duration {
        Some(duration) => Arg::new(duration.name, ArgKind::Integer).after_token(option.token),
        None => Arg::token(option.token),
    }
}

/// The specs of `group`'s options, which must number `N`.
const fn members<const N: usize>(group: Group) -> [Arg; N] {
    let mut members = [UNIT_ARG; N];
    let (mut at, mut found) = (0, 0);
    while at < OPTIONS.len() {
        if OPTIONS[at].group as u8 == group as u8 {
            assert!(
                found < N,
                "a group has more options than its alternatives hold"
            );
            members[found] = option_arg(&OPTIONS[at]);
            found += 1;
        }
        at += 1;
    }
    assert!(
        found == N,
        "a group has fewer options than its alternatives hold"
    );
    members
}

/// The spec of the one option of `group`.
const fn only_member(group: Group) -> Arg {
    members::<1>(group)[0]
}

/// `DELAY max_wait | AT_MOST | FORCE`.
const SHORTFALL_ALTERNATIVES: [Arg; 3] = members(Group::Shortfall);

/// The shared options' specs, one per group, in the usage line's order.
pub(super) const SHARED_ARGS: [Arg; Group::ALL.len()] = {
    // The groups follow each other in `OPTIONS` as in the usage line.
    let mut at = 1;
    while at < OPTIONS.len() {
        assert!(OPTIONS[at - 1].group as u8 <= OPTIONS[at].group as u8);
        at += 1;
    }
    let mut args = [UNIT_ARG; Group::ALL.len()];
    let mut group = 0;
    while group < Group::ALL.len() {
        args[group] = Group::ALL[group].arg();
        group += 1;
    }
    args
};

/// `args` then `more`, as one array of `N`.
pub(super) const fn concatenated<const N: usize>(args: &[Arg], more: &[Arg]) -> [Arg; N] {
    assert!(args.len() + more.len() == N);
    let mut all = [UNIT_ARG; N];
    let mut at = 0;
    while at < N {
        all[at] = if at < args.len() {
            args[at]
        } else {
            more[at - args.len()]
        };
        at += 1;
    }
    all
}

/// A writing command's arguments, without `REFUND`: its read-only variant's.
pub(super) const fn without_refund(args: &'static [Arg]) -> &'static [Arg] {
    args.split_at(args.len() - 1).0
}

/// A limiting command's argument specs: its own (`[key, numbers...]`), the quantity and the
/// unit, its own keywords (`[...]`), then the shared options ([`SHARED_ARGS`], from
/// [`OPTIONS`]), `REFUND` last.
macro_rules! limiting_args {
    ([$($own:expr),* $(,)?], [$($keyword:expr),* $(,)?]) => {{
        use $crate::commands::grammar::{concatenated, QUANTITY_ARG, SHARED_ARGS, UNIT_ARG};
        const OWN: &[Arg] = &[$($own,)* QUANTITY_ARG, UNIT_ARG, $($keyword,)*];
        const ALL: [Arg; OWN.len() + SHARED_ARGS.len()] = concatenated(OWN, &SHARED_ARGS);
        &ALL
    }};
}
pub(super) use limiting_args;

#[cfg(test)]
mod tests;
