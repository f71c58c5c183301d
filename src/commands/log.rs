//! `RL.LOG key limit window [quantity] [S | MS | US] [BLOCK duration]
//! [DELAY max_wait|AT_MOST|FORCE] [REFUND]`: the exact sliding log, in the module's native
//! type; and `RL.LOG_RO`, the same decision without writing. What a change sends to
//! replicas and the AOF is `RL.LOG.APPLY` (see `commands::apply`).

use std::ffi::c_int;

use crate::core::limiter::Limiter;
use crate::core::log::LogLimiter;
use crate::core::time::{Rounding, Unit};
use crate::error::CommandError;
use crate::options::integer_argument;
use crate::redis::call::{Invocation, Reply};
use crate::redis::registration::{Arg, ArgKind, Mode};

use super::grammar::{limiting_args, parse_options, CommonOptions};
use super::limiting::one_limiter;

/// The command's name and its three required arguments.
pub(super) const REQUIRED_ARGUMENTS: c_int = 4;

pub(super) const ARGS: &[Arg] = limiting_args!(
    [
        Arg::new(c"key", ArgKind::Key),
        Arg::new(c"limit", ArgKind::Integer),
        Arg::new(c"window", ArgKind::Integer),
    ],
    []
);

pub(super) fn log(call: &Invocation, mode: Mode) -> Result<Reply, CommandError> {
    let (params, options) = parse(&call.args[2..])?;
    let limiter = params.limiter(options.unit)?;
    one_limiter(call, limiter, &options, mode, Rounding::Up)
}

/// Parses the arguments after the command's name and key.
fn parse(args: &[&[u8]]) -> Result<(Params, CommonOptions), CommandError> {
    let [limit, window, tail @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    Ok((
        Params::parse(limit, window)?,
        parse_options(tail, |_, _| Ok(false))?,
    ))
}

/// The log's parameters as given: `limit window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    limit: i64,
    window: i64,
}

impl Params {
    /// Parses `limit window`.
    pub fn parse(limit: &[u8], window: &[u8]) -> Result<Params, CommandError> {
        Ok(Params {
            limit: integer_argument(limit, c"ERR limit is not an integer or out of range")?,
            window: integer_argument(window, c"ERR window is not an integer or out of range")?,
        })
    }

    /// The limiter, with `window` in `unit`s.
    pub fn limiter(&self, unit: Unit) -> Result<Limiter, CommandError> {
        Ok(Limiter::Log(LogLimiter::new(
            self.limit,
            self.window,
            unit,
        )?))
    }
}
