//! Per-command counters, shown by `INFO ratelimit` (and `INFO modules`, `INFO everything`):
//!
//! ```text
//! # ratelimit_commands
//! ratelimit_cl.throttle:calls=9,allowed=3,limited=1,peeks=1,refunds=1,errors=0,delayed=1,partial=1,forced=1
//! ```
//!
//! Counting costs two plain increments per call: commands run on Redis' main thread only, so
//! the counters are atomics written without read-modify-write instructions (a relaxed load
//! and store), which readers on other threads (a crash report) still see whole.

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use redis_module::raw;

use crate::redis::api::{self, Ctx, InfoCtx};
use crate::redis::call::Outcome;
use crate::redis::registration::{Command, MAX_COMMANDS};

/// One counter, written by Redis' main thread only.
struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }

    /// Adds one. Not a read-modify-write: only the main thread writes.
    fn bump(&self) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The counters of one command, since the module loaded: its calls, and one per
/// [`Outcome`].
pub struct CommandStats {
    calls: Counter,
    outcomes: [Counter; Outcome::ALL.len()],
}

impl CommandStats {
    /// Zeroed counters.
    pub const fn new() -> CommandStats {
        CommandStats {
            calls: Counter::new(),
            outcomes: [const { Counter::new() }; Outcome::ALL.len()],
        }
    }

    /// Counts a call that ended with `outcome`.
    pub fn record(&self, outcome: Outcome) {
        self.calls.bump();
        self.outcomes[outcome as usize].bump();
    }

    /// The counters in `INFO`'s order, with their names: `calls`, then the outcomes'.
    fn fields(&self) -> [(&'static CStr, u64); 1 + Outcome::ALL.len()] {
        let mut fields = [(c"calls", self.calls.get()); 1 + Outcome::ALL.len()];
        for (field, outcome) in fields[1..].iter_mut().zip(Outcome::ALL) {
            *field = (outcome.counter(), self.outcomes[outcome as usize].get());
        }
        fields
    }
}

/// The counters of each command of the table, by its place in it.
static STATS: [CommandStats; MAX_COMMANDS] = [const { CommandStats::new() }; MAX_COMMANDS];

/// Counts a call of command `index` of the table that ended with `outcome`.
pub fn record(index: usize, outcome: Outcome) {
    if let Some(stats) = STATS.get(index) {
        stats.record(outcome);
    }
}

/// The command table, whose counted commands `INFO` reports, set once at load.
static REPORTED: OnceLock<&'static [Command]> = OnceLock::new();

/// Registers the `INFO` section for the counters of the counted commands of `commands`. It
/// takes the place of the SDK's default callback, which only added a backtrace to crash
/// reports.
pub fn register_info(ctx: Ctx<'_>, commands: &'static [Command]) -> Result<(), &'static str> {
    let _ = REPORTED.set(commands);
    if api::register_info_func(ctx, add_info) {
        Ok(())
    } else {
        Err("the INFO section could not be registered")
    }
}

/// Redis' callback for `INFO`: one section, one line per counted command.
unsafe extern "C" fn add_info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    // SAFETY: the server's INFO context, alive during its callback.
    let Some(ctx) = (unsafe { InfoCtx::from_raw(ctx) }) else {
        return;
    };
    let _ = std::panic::catch_unwind(|| {
        let commands = REPORTED.get().copied().unwrap_or_default();
        api::info_add_section(ctx, c"commands");
        for (command, stats) in commands
            .iter()
            .zip(&STATS)
            .filter(|(command, _)| command.counted)
        {
            api::info_begin_dict_field(ctx, command.name);
            for (name, value) in stats.fields() {
                api::info_add_field_ulonglong(ctx, name, value);
            }
            api::info_end_dict_field(ctx);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_counts_once_under_its_outcome() {
        let stats = CommandStats::new();
        for outcome in [
            Outcome::Allowed,
            Outcome::Allowed,
            Outcome::Limited,
            Outcome::Peek,
            Outcome::Refund,
            Outcome::Error,
            Outcome::Delayed,
            Outcome::AtMost,
            Outcome::AtMost,
            Outcome::Forced,
            Outcome::Shed,
        ] {
            stats.record(outcome);
        }
        for (at, outcome) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, at, "{outcome:?} counts in its own place");
        }
        let fields = stats
            .fields()
            .map(|(name, value)| (name.to_str().unwrap(), value));
        assert_eq!(
            fields,
            [
                ("calls", 11),
                ("allowed", 2),
                ("limited", 1),
                ("peeks", 1),
                ("refunds", 1),
                ("errors", 1),
                ("delayed", 1),
                ("partial", 2),
                ("forced", 1),
                ("shed", 1)
            ]
        );
    }
}
