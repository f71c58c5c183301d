//! The argument specs every command shares (for `COMMAND DOCS` and the usage lines): the
//! quantity, the unit, `BLOCK`, what a take that does not fit does, and `REFUND`.

use crate::redis::metadata::{Arg, ArgKind};

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
