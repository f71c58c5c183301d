//! The argument specs every command shares (for `COMMAND DOCS` and the usage lines): the
//! quantity, the unit, `BLOCK`, what a take that does not fit does, and `REFUND`; and
//! `limiting_args!`, which puts them after each limiting command's own, so that an option
//! every limiting command takes is one spec here and one line of the macro.

use crate::redis::registration::{Arg, ArgKind};

/// `quantity`, for `COMMAND DOCS`.
pub(super) const QUANTITY_ARG: Arg = Arg::new(c"quantity", ArgKind::Integer).optional();

/// The unit keyword all commands accept.
pub(super) const UNIT_ARG: Arg = Arg::one_of(
    c"unit",
    &[Arg::token(c"S"), Arg::token(c"MS"), Arg::token(c"US")],
)
.optional();

/// `BLOCK duration`.
pub(super) const BLOCK_ARG: Arg = Arg::new(c"duration", ArgKind::Integer)
    .after_token(c"BLOCK")
    .optional();

/// What a take that does not fit now does instead of being refused.
pub(super) const SHORTFALL_ARG: Arg = Arg::one_of(
    c"shortfall",
    &[
        Arg::new(c"max_wait", ArgKind::Integer).after_token(c"DELAY"),
        Arg::token(c"AT_MOST"),
        Arg::token(c"FORCE"),
    ],
)
.optional();

/// `REFUND`: last in every argument list, so that a read-only variant's list is the same
/// without it.
pub(super) const REFUND_ARG: Arg = Arg::token(c"REFUND").optional();

/// A writing command's arguments, without `REFUND`: its read-only variant's.
pub(super) const fn without_refund(args: &'static [Arg]) -> &'static [Arg] {
    args.split_at(args.len() - 1).0
}

/// A limiting command's argument specs: its own (`[key, numbers...]`), the quantity and the
/// unit, its own keywords (`[...]`), then the options every limiting command shares (`BLOCK`,
/// what a take that does not fit does) and `REFUND`, last.
macro_rules! limiting_args {
    ([$($own:expr),* $(,)?], [$($keyword:expr),* $(,)?]) => {
        &[
            $($own,)*
            $crate::commands::grammar::QUANTITY_ARG,
            $crate::commands::grammar::UNIT_ARG,
            $($keyword,)*
            $crate::commands::grammar::BLOCK_ARG,
            $crate::commands::grammar::SHORTFALL_ARG,
            $crate::commands::grammar::REFUND_ARG,
        ]
    };
}
pub(super) use limiting_args;
