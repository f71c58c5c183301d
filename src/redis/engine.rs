//! The one engine behind every limiter command: a call names one limiter (`CL.THROTTLE`,
//! `RL.WINDOW`, `RL.LOG`) or several (`RL.ALL`), each on its own key, and asks them one
//! [`Request`]. The engine
//!
//! 1. opens every key and decides every limiter, writing nothing (a bad key anywhere, a
//!    `WRONGTYPE`, stops the call before any write);
//! 2. settles the call: a take is admitted only if every limiter admits it; a refund always
//!    is;
//! 3. stores what the settled call changes (every limiter's new state when admitted, only
//!    the blocks a refusal starts otherwise, nothing for a read-only call), and propagates
//!    each change as its effect, which Redis wraps in one `MULTI`/`EXEC` when there are
//!    several.

use redis_module::raw;

use crate::core::all::{conclude, Conclusion, Decided, Settlement};
use crate::core::limiter::{commit_log, decide_log, decide_string, Limiter, LogWrite, StringWrite};
use crate::core::log::{LogLimiter, SlidingLog};
use crate::core::request::{Action, Request};
use crate::core::verdict::Verdict;
use crate::core::window::{Scratch, StateError};
use crate::error::CommandError;
use crate::packed::Packed;
use crate::redis::command_local::CommandLocal;
use crate::redis::handler::Invocation;
use crate::redis::key::{Access, LimiterKey};

/// The most limiters one call names.
pub const MAX_LIMITERS: usize = 16;

/// One limiter a call names: its key and its parameters.
#[derive(Clone, Copy)]
pub struct Named {
    /// The key, one of the call's arguments.
    pub key: *mut raw::RedisModuleString,
    /// The limiter.
    pub limiter: Limiter,
}

/// Whether a call may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A writing command: stores and propagates what it decides.
    Write,
    /// A `_RO` variant: the same decision, never stored.
    ReadOnly,
}

/// How a log's change reaches replicas and the AOF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogEffect {
    /// As `RL.LOG.REPLAY` with the call's time: what a client's call propagates.
    Replay,
    /// As the command came: for `RL.LOG.REPLAY` itself, already deterministic.
    Verbatim,
}

/// The command an admitted log change propagates.
pub const REPLAY_COMMAND: &std::ffi::CStr = c"RL.LOG.REPLAY";

/// A call's working memory. Commands run one at a time, so one set, kept warm, serves every
/// call without allocating.
struct Working {
    /// The new string states of the running call, one buffer per limiter.
    buffers: [Vec<u8>; MAX_LIMITERS],
    /// Working memory of the window counters.
    scratch: Scratch,
}

static WORKING: CommandLocal<Working> = CommandLocal::new(Working {
    buffers: [const { Vec::new() }; MAX_LIMITERS],
    scratch: Scratch::new(),
});

/// Working memory of the window counters for a limiter's standing, read while the call's is
/// in use.
static STANDING_SCRATCH: CommandLocal<Scratch> = CommandLocal::new(Scratch::new());

/// What one limiter will store if the call commits.
#[derive(Clone, Copy)]
enum Plan {
    String(StringWrite),
    Log(LogWrite),
}

/// What a call asks of each limiter it names: the same for all of them.
#[derive(Clone, Copy)]
struct Ask<'a> {
    call: &'a Invocation<'a>,
    request: &'a Request,
    mode: Mode,
    now: i64,
    log_effect: LogEffect,
}

/// What one limiter decided, having changed nothing.
struct Decision {
    verdict: Verdict,
    plan: Plan,
    /// Whether the plan is a block this refusal starts.
    starts_block: bool,
}

/// One limiter of a running call over several, decided.
struct Slot<'a> {
    ask: &'a Ask<'a>,
    limiter: &'a Limiter,
    key: LimiterKey,
    decision: Decision,
    /// The new string state the plan stores.
    value: &'a [u8],
}

/// Runs `request` at `now` (µs since the epoch, read once for the whole call) against every
/// limiter in `named` (at most `N`), as described in the module's documentation, and writes
/// each limiter's reply to `verdicts`, in the same order. `N` sizes the call's working
/// state.
pub fn run<const N: usize>(
    call: &Invocation,
    named: &[Named],
    request: &Request,
    mode: Mode,
    now: i64,
    log_effect: LogEffect,
    verdicts: &mut [Verdict],
) -> Result<(), CommandError> {
    debug_assert!((1..=N.min(MAX_LIMITERS)).contains(&named.len()));
    let ask = Ask {
        call,
        request,
        mode,
        now,
        log_effect,
    };
    WORKING.with(|working| {
        let Working { buffers, scratch } = working;
        let mut slots: [Option<Slot>; N] = [const { None }; N];
        for ((slot, named), buffer) in slots.iter_mut().zip(named).zip(buffers.iter_mut()) {
            let key = open(&ask, named)?;
            let decision = decide(&ask, &named.limiter, &key, buffer, scratch)?;
            *slot = Some(Slot {
                ask: &ask,
                limiter: &named.limiter,
                key,
                decision,
                value: buffer,
            });
        }
        conclude(&mut slots, request, mode == Mode::Write, verdicts)
    })
}

/// [`run`] for a call of one limiter: what the single-key commands run. The same steps, in
/// a straight line: nothing is gathered for a settlement that has one limiter to weigh.
pub fn run_one(
    call: &Invocation,
    named: &Named,
    request: &Request,
    mode: Mode,
    now: i64,
    log_effect: LogEffect,
) -> Result<Verdict, CommandError> {
    let ask = Ask {
        call,
        request,
        mode,
        now,
        log_effect,
    };
    let limiter = &named.limiter;
    WORKING.with(|working| {
        let Working { buffers, scratch } = working;
        let mut key = open(&ask, named)?;
        let decision = decide(&ask, limiter, &key, &mut buffers[0], scratch)?;
        let settlement = Settlement::of(request, [(decision.verdict, limiter.limit())]);
        let write = mode == Mode::Write;
        match settlement.conclusion(write, decision.starts_block, &decision.verdict) {
            Conclusion::Commit => commit(&ask, limiter, &mut key, &decision, &buffers[0]),
            Conclusion::Standing => standing(&ask, limiter, &key),
            Conclusion::AsDecided => Ok(decision.verdict),
        }
    })
}

/// Opens `named`'s key: for writing when the call may change it.
#[inline(always)]
fn open(ask: &Ask, named: &Named) -> Result<LimiterKey, CommandError> {
    let access = if ask.mode == Mode::Write && ask.request.may_write(named.limiter.limit()) {
        Access::Write
    } else {
        Access::Read
    };
    LimiterKey::open(ask.call, named.key, access)
}

/// Decides `limiter` on its open `key`, changing nothing; a new string state goes to
/// `buffer`.
#[inline(always)]
fn decide(
    ask: &Ask,
    limiter: &Limiter,
    key: &LimiterKey,
    buffer: &mut Vec<u8>,
    scratch: &mut Scratch,
) -> Result<Decision, CommandError> {
    Ok(match limiter {
        Limiter::Log(limiter) => {
            let log = key.native_view::<SlidingLog>()?;
            let (verdict, write) = decide_log(limiter, log.as_deref(), ask.now, ask.request);
            Decision {
                verdict,
                plan: Plan::Log(write),
                starts_block: matches!(write, LogWrite::StartBlock(_)),
            }
        }
        limiter => {
            let stored = key.read(state_length(limiter))?;
            let decision = decide_string(limiter, stored, ask.now, ask.request, scratch, buffer);
            let decision = decision.map_err(state_error)?;
            Decision {
                verdict: decision.verdict,
                plan: Plan::String(decision.write),
                starts_block: decision.starts_block,
            }
        }
    })
}

/// The lengths a string limiter's value can have, blocked or not.
fn state_length(limiter: &Limiter) -> impl Fn(usize) -> bool {
    let own: fn(usize) -> bool = match limiter {
        Limiter::Throttle(_) => crate::core::codec::is_gcra_length,
        _ => crate::core::window::is_window_length,
    };
    move |len| crate::core::codec::is_state_length(own, len)
}

/// The reply to a value that is not the limiter's state.
pub fn state_error(error: StateError) -> CommandError {
    match error {
        StateError::Foreign => CommandError::WRONG_TYPE,
        StateError::OtherAlgorithm => CommandError::Message(
            c"WRONGTYPE the key holds the state of another RL.WINDOW algorithm",
        ),
    }
}

impl Decided for Slot<'_> {
    type Error = CommandError;

    fn verdict(&self) -> Verdict {
        self.decision.verdict
    }

    fn limit(&self) -> u64 {
        self.limiter.limit()
    }

    fn starts_block(&self) -> bool {
        self.decision.starts_block
    }

    fn standing(&mut self) -> Result<Verdict, CommandError> {
        standing(self.ask, self.limiter, &self.key)
    }

    fn commit(&mut self) -> Result<Verdict, CommandError> {
        commit(
            self.ask,
            self.limiter,
            &mut self.key,
            &self.decision,
            self.value,
        )
    }
}

/// `limiter`'s standing on its open `key`, uncharged, as a peek sees it.
fn standing(ask: &Ask, limiter: &Limiter, key: &LimiterKey) -> Result<Verdict, CommandError> {
    let peek = Request::take(0);
    Ok(match limiter {
        Limiter::Log(limiter) => {
            let log = key.native_view::<SlidingLog>()?;
            decide_log(limiter, log.as_deref(), ask.now, &peek).0
        }
        limiter => {
            let stored = key.read(state_length(limiter))?;
            STANDING_SCRATCH
                .with(|scratch| {
                    decide_string(limiter, stored, ask.now, &peek, scratch, &mut Vec::new())
                })
                .map_err(state_error)?
                .verdict
        }
    })
}

/// Stores what `limiter` decided on its open `key` (`value`: the new string state) and
/// propagates it; returns the reply after.
#[inline(always)]
fn commit(
    ask: &Ask,
    limiter: &Limiter,
    key: &mut LimiterKey,
    decision: &Decision,
    value: &[u8],
) -> Result<Verdict, CommandError> {
    let (request, now) = (*ask.request, ask.now);
    let mut verdict = decision.verdict;
    match (decision.plan, limiter) {
        (Plan::String(StringWrite::Nothing), _) | (Plan::Log(LogWrite::Nothing), _) => {}
        (
            Plan::String(StringWrite::Store {
                expire_at_ms,
                placement,
            }),
            _,
        ) => {
            key.write(value, placement, expire_at_ms)?;
        }
        (Plan::String(StringWrite::Delete), _) => {
            key.delete(raw::REDISMODULE_NOTIFY_STRING)?;
            key.propagate(|| key.replicate_delete());
        }
        (Plan::Log(write), Limiter::Log(limiter)) => {
            let commit = match key.native_borrow::<SlidingLog>()? {
                Some(mut log) => commit_log(limiter, &mut log, now, &request, write, &mut verdict),
                None => {
                    let mut log = SlidingLog::default();
                    let commit = commit_log(limiter, &mut log, now, &request, write, &mut verdict);
                    if !commit.delete {
                        key.set_native(log)?;
                    }
                    commit
                }
            };
            if commit.delete {
                key.delete(raw::REDISMODULE_NOTIFY_MODULE)?;
            } else {
                key.changed_in_place(Some(commit.expire_at_ms))?;
            }
            key.propagate(|| propagate_log(ask.call, key, limiter, &request, now, ask.log_effect));
        }
        (Plan::Log(_), _) => return Err(CommandError::INTERNAL),
    }
    Ok(verdict)
}

/// Propagates a log's change: the call again, with the time it ran at, so that replicas and
/// the AOF reach the same log and expiry (a few integers, whatever the log's length), packed
/// in one argument: `RL.LOG.REPLAY key limit,window_us,quantity,now_us[,REFUND|,BLOCK,us]`.
fn propagate_log(
    call: &Invocation,
    key: &LimiterKey,
    limiter: &LogLimiter,
    request: &Request,
    now: i64,
    log_effect: LogEffect,
) {
    // SAFETY: the running command's context and key; the fields outlive the call.
    unsafe {
        if log_effect == LogEffect::Verbatim {
            raw::RedisModule_ReplicateVerbatim.unwrap()(call.ctx);
            return;
        }
        let mut fields = Packed::default();
        fields
            .int(limiter.limit() as i64)
            .int(limiter.window_micros())
            .int(request.quantity as i64)
            .int(now);
        match (request.action, request.block) {
            (Action::Refund, _) => {
                fields.word("REFUND");
            }
            (Action::Take, Some(block)) => {
                fields.word("BLOCK").int(block);
            }
            (Action::Take, None) => {}
        }
        let fields = fields.as_bytes();
        raw::RedisModule_Replicate.unwrap()(
            call.ctx,
            REPLAY_COMMAND.as_ptr(),
            c"sb".as_ptr(),
            key.name(),
            fields.as_ptr(),
            fields.len(),
        );
    }
}
