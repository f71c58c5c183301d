//! What a call asks of a limiter: to take a quantity (0 only looks) or to give one back
//! (`REFUND`), and whether a refusal starts a penalty block (`BLOCK duration`).

use super::time::Micros;

/// Take or give back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Count `quantity` if it fits; 0 only looks.
    Take,
    /// Give back `quantity` taken earlier (`REFUND`).
    Refund,
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
}

impl Request {
    /// A request to take `quantity`, without a block.
    pub fn take(quantity: u64) -> Request {
        Request {
            action: Action::Take,
            quantity,
            block: None,
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

    /// Whether it can change a limiter that admits at most `limit` at once: a take that may
    /// fit, or a refund of something. Peeks and quantities that can never fit only read.
    pub fn may_write(&self, limit: u64) -> bool {
        match self.action {
            Action::Take => self.quantity > 0 && self.quantity <= limit,
            Action::Refund => self.quantity > 0,
        }
    }
}
