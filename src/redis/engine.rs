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

use crate::core::all::{conclude, conclude_one, Decided};
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

/// One limiter of a running call, decided.
struct Slot<'a> {
    call: &'a Invocation<'a>,
    key: LimiterKey,
    limiter: &'a Limiter,
    request: &'a Request,
    now: i64,
    log_effect: LogEffect,
    verdict: Verdict,
    plan: Plan,
    /// Whether the plan is a block this refusal starts.
    starts_block: bool,
    /// The new string state the plan stores.
    value: &'a [u8],
}

/// Runs `request` at `now` (µs since the epoch, read once for the whole call) against every
/// limiter in `named` (at most `N`), as described in the module's documentation, and writes
/// each limiter's reply to `verdicts`, in the same order. `N` sizes the call's working
/// state: 1 for the single-key commands, so that they pay for no more.
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
    WORKING.with(|working| {
        let Working { buffers, scratch } = working;
        let mut slots: [Option<Slot>; N] = [const { None }; N];
        for ((slot, named), buffer) in slots.iter_mut().zip(named).zip(buffers.iter_mut()) {
            *slot = Some(decide(
                call, named, request, mode, now, log_effect, buffer, scratch,
            )?);
        }
        conclude(&mut slots, request, mode == Mode::Write, verdicts)
    })
}

/// [`run`] for a call of one limiter, with nothing to size: what the single-key commands
/// run.
pub fn run_one(
    call: &Invocation,
    named: &Named,
    request: &Request,
    mode: Mode,
    now: i64,
    log_effect: LogEffect,
) -> Result<Verdict, CommandError> {
    WORKING.with(|working| {
        let Working { buffers, scratch } = working;
        let buffer = &mut buffers[0];
        let mut slot = decide(call, named, request, mode, now, log_effect, buffer, scratch)?;
        conclude_one(&mut slot, request, mode == Mode::Write)
    })
}

/// Opens `named`'s key and decides its limiter, changing nothing; a new string state goes
/// to `buffer`.
#[allow(clippy::too_many_arguments)] // The call's parts, passed down as they are.
#[inline(always)]
fn decide<'a>(
    call: &'a Invocation<'a>,
    named: &'a Named,
    request: &'a Request,
    mode: Mode,
    now: i64,
    log_effect: LogEffect,
    buffer: &'a mut Vec<u8>,
    scratch: &mut Scratch,
) -> Result<Slot<'a>, CommandError> {
    let access = if mode == Mode::Write && request.may_write(named.limiter.limit()) {
        Access::Write
    } else {
        Access::Read
    };
    let key = LimiterKey::open(call, named.key, access)?;
    let (verdict, plan, starts_block) = match &named.limiter {
        Limiter::Log(limiter) => {
            let log = key.native_view::<SlidingLog>()?;
            let (verdict, write) = decide_log(limiter, log.as_deref(), now, request);
            let starts_block = matches!(write, LogWrite::StartBlock(_));
            (verdict, Plan::Log(write), starts_block)
        }
        limiter => {
            let stored = key.read(state_length(limiter))?;
            let decision = decide_string(limiter, stored, now, request, scratch, buffer);
            let decision = decision.map_err(state_error)?;
            (
                decision.verdict,
                Plan::String(decision.write),
                decision.starts_block,
            )
        }
    };
    Ok(Slot {
        call,
        key,
        limiter: &named.limiter,
        request,
        now,
        log_effect,
        verdict,
        plan,
        starts_block,
        value: buffer,
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
        self.verdict
    }

    fn limit(&self) -> u64 {
        self.limiter.limit()
    }

    fn starts_block(&self) -> bool {
        self.starts_block
    }

    fn standing(&mut self) -> Result<Verdict, CommandError> {
        let peek = Request::take(0);
        Ok(match &self.limiter {
            Limiter::Log(limiter) => {
                let log = self.key.native_view::<SlidingLog>()?;
                decide_log(limiter, log.as_deref(), self.now, &peek).0
            }
            limiter => {
                let stored = self.key.read(state_length(limiter))?;
                STANDING_SCRATCH
                    .with(|scratch| {
                        decide_string(limiter, stored, self.now, &peek, scratch, &mut Vec::new())
                    })
                    .map_err(state_error)?
                    .verdict
            }
        })
    }

    fn commit(&mut self) -> Result<Verdict, CommandError> {
        let (request, now) = (*self.request, self.now);
        match (self.plan, self.limiter) {
            (Plan::String(StringWrite::Nothing), _) | (Plan::Log(LogWrite::Nothing), _) => {}
            (
                Plan::String(StringWrite::Store {
                    expire_at_ms,
                    placement,
                }),
                _,
            ) => {
                self.key.write(self.value, placement, expire_at_ms)?;
            }
            (Plan::String(StringWrite::Delete), _) => {
                self.key.delete(raw::REDISMODULE_NOTIFY_STRING)?;
                self.key.propagate(|| self.key.replicate_delete());
            }
            (Plan::Log(write), Limiter::Log(limiter)) => {
                let commit = match self.key.native_borrow::<SlidingLog>()? {
                    Some(mut log) => {
                        commit_log(limiter, &mut log, now, &request, write, &mut self.verdict)
                    }
                    None => {
                        let mut log = SlidingLog::default();
                        let verdict = &mut self.verdict;
                        let commit = commit_log(limiter, &mut log, now, &request, write, verdict);
                        if !commit.delete {
                            self.key.set_native(log)?;
                        }
                        commit
                    }
                };
                if commit.delete {
                    self.key.delete(raw::REDISMODULE_NOTIFY_MODULE)?;
                } else {
                    self.key.changed_in_place(Some(commit.expire_at_ms))?;
                }
                self.key.propagate(|| {
                    propagate_log(
                        self.call,
                        &self.key,
                        limiter,
                        &request,
                        now,
                        self.log_effect,
                    )
                });
                return Ok(self.verdict);
            }
            (Plan::Log(_), _) => return Err(CommandError::INTERNAL),
        }
        Ok(self.verdict)
    }
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
