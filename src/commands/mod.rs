//! The commands: each parses its arguments, opens its key, runs its core and replies,
//! through the shared layers in `crate::args` and `crate::redis`.

pub mod debug;
pub mod throttle;
pub mod window;

use crate::redis::metadata::{Arg, CommandSpec};

/// Every command the module registers.
pub static ALL: [&CommandSpec; 2] = [&throttle::SPEC, &window::SPEC];

/// The unit keyword all commands accept, for `COMMAND DOCS`.
const UNIT_ARG: Arg = Arg::one_of(
    c"unit",
    &[Arg::token(c"S"), Arg::token(c"MS"), Arg::token(c"US")],
)
.optional();
