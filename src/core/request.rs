//! What a call asks of a limiter: to take a quantity (0 only looks) or to give one back
//! (`REFUND`), whether a refusal starts a penalty block (`BLOCK duration`), and what a take
//! that does not fit now does instead of being refused ([`Shortfall`]).

use super::time::Micros;

/// Take or give back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Count `quantity` if it fits; 0 only looks.
    Take,
    /// Give back `quantity` taken earlier (`REFUND`).
    Refund,
}

/// What a take that does not fit now does: the settlement rules of the engine
/// ([`super::engine`]), the same for every limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shortfall {
    /// It is refused.
    Refuse,
    /// `DELAY max_wait`: it is admitted at the earliest time it fits, after every request
    /// admitted or scheduled before it, if that is at most `max_wait` away; the caller waits
    /// until then.
    Delay(Micros),
    /// `AT_MOST`: as much of it as fits now is admitted, at least 1.
    AtMost,
    /// `FORCE`: it is admitted whole; what does not fit now is charged at the earliest times
    /// it fits, a debt that later requests wait out.
    Force,
}

/// One call's request to each limiter it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Take or give back.
    pub action: Action,
    /// How much.
    pub quantity: u64,
    /// `BLOCK`: how long a refusal because the limit is used up keeps the key refused.
    pub block: Option<Micros>,
    /// What a take that does not fit now does.
    pub shortfall: Shortfall,
}

impl Request {
    /// A request to take `quantity`, without a block.
    pub fn take(quantity: u64) -> Request {
        Request {
            action: Action::Take,
            quantity,
            block: None,
            shortfall: Shortfall::Refuse,
        }
    }

    /// A request to give back `quantity`.
    pub fn refund(quantity: u64) -> Request {
        Request {
            action: Action::Refund,
            ..Request::take(quantity)
        }
    }

    /// The same request, taking or giving back as `action` says.
    #[cfg(test)]
    pub fn with_action(self, action: Action) -> Request {
        Request { action, ..self }
    }

    /// The same request for `quantity`.
    pub fn with_quantity(self, quantity: u64) -> Request {
        Request { quantity, ..self }
    }

    /// Whether it can change a limiter that admits at most `limit` at once: a take that may
    /// fit (any take with `AT_MOST` or `FORCE`), or a refund of something. Peeks, and
    /// quantities that can never fit, only read.
    pub fn may_write(&self, limit: u64) -> bool {
        match (self.action, self.shortfall) {
            (Action::Take, Shortfall::AtMost | Shortfall::Force) => self.quantity > 0,
            (Action::Take, _) => self.quantity > 0 && self.quantity <= limit,
            (Action::Refund, _) => self.quantity > 0,
        }
    }
}
