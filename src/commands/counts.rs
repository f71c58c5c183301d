//! What a window or a log counts, read without writing, for clients that keep their own
//! arithmetic over the counts (the `limits` library's sliding-window counter and moving
//! window, under slowapi and Flask-Limiter):
//!
//! - `RL.WINDOW.COUNTS key window [FIXED | SLIDING | ANCHORED] [S | MS | US]`: `[previous,
//!   previous_ends_in, current, current_ends_in]`, the previous window's count (`SLIDING`)
//!   and how long it still weighs, the current window's count and how long it still counts;
//! - `RL.LOG.COUNTS key window [S | MS | US]`: `[count, oldest_ends_in, newest_ends_in]`, the
//!   units in the window and how long until its oldest and its newest entries leave it.
//!
//! Times are in the call's unit, rounded up; a missing key counts nothing (all zeros).

use crate::core::codec::split_blocked;
use crate::core::engine::{Key, Store};
use crate::core::limiter::Limiter;
use crate::core::log::{LogLimiter, SlidingLog};
use crate::core::time::{Micros, Rounding, Unit};
use crate::core::windows::{Algorithm, WindowLimiter};
use crate::error::CommandError;
use crate::options::{integer_argument, Keyword};
use crate::redis::call::{Integers, Invocation, Reply};
use crate::redis::clock;
use crate::redis::registration::Mode;
use crate::redis::store::RedisStore;

use super::grammar::{parse_options, CommonOptions};

/// Refuses every option but a unit: there is no request to qualify.
fn only_unit(options: &CommonOptions) -> Result<(), CommandError> {
    let plain = CommonOptions {
        unit: options.unit,
        ..CommonOptions::default()
    };
    if *options == plain {
        Ok(())
    } else {
        Err(CommandError::Syntax)
    }
}

/// A span from `now` to `at`, in `unit`s, rounded up.
fn until(at: Micros, now: Micros, unit: Unit) -> i64 {
    (at - now).ticks().in_units(unit, Rounding::Up)
}

pub(super) fn window_counts(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let [window, tail @ ..] = &call.args[2..] else {
        return Err(CommandError::WrongArity);
    };
    let window = integer_argument(window, c"ERR window is not an integer or out of range")?;
    let mut algorithm = None;
    let options = parse_options(tail, |keyword, _| {
        let chosen = match keyword {
            k if k == Keyword::new("FIXED") => Algorithm::Fixed,
            k if k == Keyword::new("SLIDING") => Algorithm::Sliding,
            k if k == Keyword::new("ANCHORED") => Algorithm::Anchored,
            _ => return Ok(false),
        };
        if algorithm.replace(chosen).is_some() {
            return Err(CommandError::Syntax);
        }
        Ok(true)
    })?;
    only_unit(&options)?;
    let algorithm = algorithm.unwrap_or(Algorithm::Sliding);
    // The limit plays no part in the counts.
    let limiter = WindowLimiter::new(1, window, options.unit, algorithm)?;
    let now = clock::now();
    let store = RedisStore::single(call, false);
    let key = store.open(0, false)?;
    let stored = key.string(|len| Limiter::Window(limiter).accepts_length(len))?;
    let own = stored.and_then(|value| split_blocked(value).1);
    let counts = limiter
        .counts(own, now)
        .ok_or(CommandError::INTERNAL)?
        .map_err(CommandError::from)?;
    let unit = options.unit;
    Ok(Reply::Integers(Integers::of(&[
        counts.previous as i64,
        until(counts.previous_ends_at, now, unit),
        counts.current as i64,
        until(counts.current_ends_at, now, unit),
    ])))
}

pub(super) fn log_counts(call: &Invocation, _: Mode) -> Result<Reply, CommandError> {
    let [window, tail @ ..] = &call.args[2..] else {
        return Err(CommandError::WrongArity);
    };
    let window = integer_argument(window, c"ERR window is not an integer or out of range")?;
    let options = parse_options(tail, |_, _| Ok(false))?;
    only_unit(&options)?;
    let limiter = LogLimiter::new(1, window, options.unit)?;
    let now = clock::now();
    let store = RedisStore::single(call, false);
    let key = store.open(0, false)?;
    let log = key.native::<SlidingLog>()?;
    let (count, oldest, newest) = limiter.counts(log.as_deref(), now);
    let unit = options.unit;
    Ok(Reply::Integers(Integers::of(&[
        count as i64,
        until(oldest, now, unit),
        until(newest, now, unit),
    ])))
}
