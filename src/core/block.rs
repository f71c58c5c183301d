//! Penalty blocks (`BLOCK duration`): after a refusal because the limit is used up, the key
//! stays refused for `duration`. The block is part of the key's state (so replicas, restarts
//! and peeks see it), whatever the algorithm; these rules apply it to what the algorithm
//! decided.
//!
//! - While a block is in force, every take is refused, peeks included, and nothing is
//!   counted: `limited` 1, `remaining` 0, `retry_after` the time left in the block (or the
//!   algorithm's own, if longer; -1 stays -1 for a quantity that can never fit), and
//!   `reset_after` at least the time left. Refused calls do not extend it.
//! - A refund still gives back what it gives back; the block stays.
//! - A block starts when a take is refused because the limit is used up (the algorithm has
//!   a retry time), never for a quantity that can never fit nor for a peek, and that
//!   refusal already replies as blocked.
//! - A block starts from none: what the key counted is dropped when it starts, so that when
//!   it ends the key admits a full limit again (the penalty is served; as @nestjs/throttler's
//!   storage and rate-limiter-flexible's `blockDuration` do). The refusal that starts it
//!   replies so: `retry_after` and `reset_after` are the block's length.

use super::request::{Action, Request};
use super::time::Micros;
use super::verdict::{RetryAfter, Verdict};

/// What a call stores for one limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Nothing.
    Nothing,
    /// The algorithm's new state (an admitted take, or a refund that gave something back),
    /// keeping any block in force.
    State,
    /// No state, blocked until this instant: the block starts from none.
    StartBlock(Micros),
}

/// One limiter's decision for a request: the reply, and what to store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The reply, before rounding.
    pub verdict: Verdict,
    /// What to store.
    pub write: Write,
}

/// The block in force at `now` for a key blocked until `blocked_until` (`Micros::ZERO` for
/// none): its end, when that is later than `now`.
pub fn in_force(blocked_until: Micros, now: Micros) -> Option<Micros> {
    (blocked_until > now).then_some(blocked_until)
}

/// The reply while the key is blocked until `until` (later than `now`), given what the
/// algorithm alone replies.
pub fn blocked_verdict(verdict: Verdict, until: Micros, now: Micros) -> Verdict {
    let left = (until - now).ticks();
    let never_fits = verdict.limited && verdict.retry_after.is_none();
    Verdict {
        limited: true,
        remaining: 0,
        retry_after: if never_fits {
            RetryAfter::NONE
        } else {
            RetryAfter::of(verdict.retry_after.or(left).max(left))
        },
        reset_after: verdict.reset_after.max(left),
        ..verdict
    }
}

/// Applies the block rules to `verdict`, what the algorithm alone decided for `request` at
/// `now` on a key blocked until `blocked_until` (`Micros::ZERO`: none); `changes` says whether
/// the algorithm's state would change (an admitted take, or a refund that gives something
/// back).
#[inline(always)]
pub fn decide(
    request: &Request,
    blocked_until: Micros,
    now: Micros,
    verdict: Verdict,
    changes: bool,
) -> Decision {
    let state_if_changed = if changes {
        Write::State
    } else {
        Write::Nothing
    };
    match (request.action, in_force(blocked_until, now)) {
        (Action::Refund, None) => Decision {
            verdict,
            write: state_if_changed,
        },
        (Action::Refund, Some(until)) => Decision {
            verdict: blocked_verdict(verdict, until, now),
            write: state_if_changed,
        },
        (Action::Take, Some(until)) => Decision {
            verdict: blocked_verdict(verdict, until, now),
            write: Write::Nothing,
        },
        (Action::Take, None) if !verdict.limited => Decision {
            verdict,
            write: state_if_changed,
        },
        (Action::Take, None) => match request.block {
            // A peek (0) only looks, even at a limiter over its limit: it starts nothing.
            Some(duration) if verdict.retry_after.is_some() && request.quantity > 0 => {
                start_block(verdict, now, duration)
            }
            _ => Decision {
                verdict,
                write: Write::Nothing,
            },
        },
    }
}

/// A refusal that starts a block of `duration` at `now`: what was counted is dropped, the
/// block alone stands. Out of line (the rare call): inlined, its arithmetic was computed
/// ahead of every decision, `BLOCK` given or not.
#[cold]
#[inline(never)]
fn start_block(verdict: Verdict, now: Micros, duration: Micros) -> Decision {
    let until = now.saturating_add(duration);
    let left = (until - now).ticks();
    Decision {
        verdict: Verdict {
            limited: true,
            remaining: 0,
            retry_after: RetryAfter::of(left),
            reset_after: left,
            ..verdict
        },
        write: Write::StartBlock(until),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const NOW: Micros = Micros::saturating(1_700_000_000_000_000);

    fn verdict(limited: bool, remaining: i64, retry: Option<i64>, reset: i64) -> Verdict {
        Verdict {
            limited,
            limit: 5,
            remaining,
            retry_after: retry
                .map(|micros| Micros::saturating(micros).ticks())
                .into(),
            reset_after: Micros::saturating(reset).ticks(),
        }
    }

    fn request(action: Action, quantity: u64, block: Option<i64>) -> Request {
        Request {
            block: block.map(Micros::saturating),
            ..Request::take(quantity).with_action(action)
        }
    }

    fn micros(micros: i64) -> Micros {
        NOW + Micros::saturating(micros)
    }

    #[test]
    fn a_refusal_because_the_limit_is_used_up_starts_a_block_and_replies_with_it() {
        let refused = verdict(true, 0, Some(300), 900);
        let decision = decide(
            &request(Action::Take, 1, Some(1_000)),
            Micros::ZERO,
            NOW,
            refused,
            false,
        );
        assert_eq!(decision.write, Write::StartBlock(micros(1_000)));
        assert_eq!(decision.verdict, verdict(true, 0, Some(1_000), 1_000));
        // The block starts from none: its length is the wait and the reset, even shorter
        // than the algorithm's own (what made it wait is dropped).
        let decision = decide(
            &request(Action::Take, 1, Some(100)),
            Micros::ZERO,
            NOW,
            refused,
            false,
        );
        assert_eq!(decision.verdict, verdict(true, 0, Some(100), 100));
    }

    #[test]
    fn no_block_for_a_peek_at_a_limiter_over_its_limit() {
        let over = verdict(true, 0, Some(300), 900);
        let decision = decide(
            &request(Action::Take, 0, Some(1_000)),
            Micros::ZERO,
            NOW,
            over,
            false,
        );
        assert_eq!(
            decision,
            Decision {
                verdict: over,
                write: Write::Nothing
            }
        );
    }

    #[test]
    fn no_block_for_a_quantity_that_never_fits_nor_without_the_option() {
        let never = verdict(true, 5, None, 0);
        let decision = decide(
            &request(Action::Take, 9, Some(1_000)),
            Micros::ZERO,
            NOW,
            never,
            false,
        );
        assert_eq!(
            decision,
            Decision {
                verdict: never,
                write: Write::Nothing
            }
        );
        let refused = verdict(true, 0, Some(300), 900);
        let decision = decide(
            &request(Action::Take, 1, None),
            Micros::ZERO,
            NOW,
            refused,
            false,
        );
        assert_eq!(
            decision,
            Decision {
                verdict: refused,
                write: Write::Nothing
            }
        );
    }

    #[test]
    fn during_a_block_every_take_is_refused_and_nothing_is_written() {
        let until = micros(700);
        for (quantity, algorithm) in [
            (1, verdict(false, 3, None, 400)),
            (0, verdict(false, 4, None, 400)),
            (2, verdict(true, 1, Some(900), 400)),
        ] {
            let decision = decide(
                &request(Action::Take, quantity, None),
                until,
                NOW,
                algorithm,
                true,
            );
            assert_eq!(decision.write, Write::Nothing);
            let retry = algorithm
                .retry_after
                .get()
                .map_or(700, |own| own.ceil_micros().get())
                .max(700);
            assert_eq!(decision.verdict, verdict(true, 0, Some(retry), 700));
        }
        // A quantity that never fits still says so.
        let never = verdict(true, 5, None, 400);
        let decision = decide(&request(Action::Take, 9, None), until, NOW, never, false);
        assert_eq!(decision.verdict, verdict(true, 0, None, 700));
        // A block that has ended is no block.
        let admitted = verdict(false, 3, None, 400);
        let decision = decide(&request(Action::Take, 1, None), NOW, NOW, admitted, true);
        assert_eq!(
            decision,
            Decision {
                verdict: admitted,
                write: Write::State
            }
        );
    }

    #[test]
    fn a_refund_gives_back_during_a_block_and_keeps_it() {
        let after = verdict(false, 5, None, 0);
        let decision = decide(
            &request(Action::Refund, 1, None),
            micros(50),
            NOW,
            after,
            true,
        );
        assert_eq!(decision.write, Write::State);
        assert_eq!(decision.verdict, verdict(true, 0, Some(50), 50));
        let decision = decide(
            &request(Action::Refund, 1, None),
            Micros::ZERO,
            NOW,
            after,
            false,
        );
        assert_eq!(
            decision,
            Decision {
                verdict: after,
                write: Write::Nothing
            }
        );
    }
}
