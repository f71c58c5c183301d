//! Several limiters, all or none: a take is admitted only if every limiter admits it, and
//! then charged to every one; refused, it is charged to none. What each limiter decided
//! alone ([`super::limiter`]) settles the call ([`super::engine`] applies the settlement);
//! [`combined`] is its reply. A call of one limiter settles the same way.

use super::request::{Action, Request};
use super::time::Ticks;
use super::verdict::Verdict;

/// How a call over several limiters settles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settlement {
    /// A refund, or a take every limiter admits.
    pub admitted: bool,
    /// Some limiter can never fit the quantity: then no refusal starts a block.
    pub never_fits: bool,
}

impl Settlement {
    /// Settles `request` given each limiter's own verdict and the most it admits at once.
    pub fn of(request: &Request, limiters: impl IntoIterator<Item = (Verdict, u64)>) -> Settlement {
        let mut settlement = Settlement {
            admitted: true,
            never_fits: false,
        };
        for (verdict, limit) in limiters {
            settlement.admitted &= !verdict.limited;
            settlement.never_fits |= request.action == Action::Take && request.quantity > limit;
        }
        settlement.admitted |= request.action == Action::Refund;
        settlement
    }

    /// The same settlement for a request the load gate shed: refused, and no block starts
    /// (nothing is written for a request shed by load).
    pub fn shed(self) -> Settlement {
        Settlement {
            admitted: false,
            never_fits: true,
        }
    }

    /// Whether a limiter whose own decision stores even when it refuses (a block its
    /// refusal starts, a state carried to new parameters) stores what it decided: every
    /// change when the call is admitted; only those otherwise.
    pub fn commits(&self, writes_refused: bool) -> bool {
        self.admitted || (writes_refused && !self.never_fits)
    }
}

/// What becomes of one limiter of a settled call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conclusion {
    /// Store what it decided; its reply is the one after (a refund's may differ).
    Commit,
    /// The call was refused elsewhere: reply with its standing, uncharged, as a peek sees it.
    Standing,
    /// Reply with what it decided; nothing is stored.
    AsDecided,
}

impl Settlement {
    /// What becomes of a limiter that decided `verdict`, storing when refused or not, in a
    /// call settled so; `write` is false for a read-only call, which never stores.
    pub fn conclusion(&self, write: bool, writes_refused: bool, verdict: &Verdict) -> Conclusion {
        if write && self.commits(writes_refused) {
            Conclusion::Commit
        } else if !self.admitted && !verdict.limited {
            Conclusion::Standing
        } else {
            Conclusion::AsDecided
        }
    }
}

/// The reply for all the limiters together: admitted only if every one admits; the binding
/// limiter's `limit` and `remaining` (admitted: the fewest remaining; refused: the refusing
/// limiter that asks the longest wait, or one the quantity can never fit); its wait (`None`
/// if some limiter can never fit it); the longest reset. Ties go to the first in key order.
pub fn combined(verdicts: &[Verdict]) -> Verdict {
    let reset_after = verdicts
        .iter()
        .map(|verdict| verdict.reset_after)
        .max()
        .unwrap_or_default();
    let wait = |verdict: &Verdict| verdict.retry_after.or(Ticks::saturating(i128::MAX));
    let refusing = verdicts.iter().filter(|verdict| verdict.limited);
    let binding = refusing.fold(None, |binding: Option<&Verdict>, verdict| match binding {
        Some(best) if wait(best) >= wait(verdict) => Some(best),
        _ => Some(verdict),
    });
    let binding = binding.unwrap_or_else(|| {
        verdicts.iter().fold(&verdicts[0], |best, verdict| {
            if verdict.remaining < best.remaining {
                verdict
            } else {
                best
            }
        })
    });
    Verdict {
        reset_after,
        ..*binding
    }
}
