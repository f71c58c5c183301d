//! The load gate of a call (`LOAD priority` in `RL.ALL`): the service's level decides, for a
//! request of its priority, whether it goes on to the other limiters. It writes nothing, and
//! while the stored standing stands it reads the header alone.

use super::layout::LoadStateBytes;
use super::levels::{LoadDecision, LoadState};
use super::priority::{admits, Priority};
use crate::core::time::Micros;

/// The load gate of a call (`LOAD priority` in `RL.ALL`): the service's level decides, for
/// a request of this priority, whether it goes on to the other limiters; it writes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadGate {
    /// The request's class.
    pub priority: Priority,
}

impl LoadGate {
    /// Decides the gate for a request at `now` from the key's stored bytes (`None`: no key,
    /// level 0, everything admitted); `draw` is a uniform random value. `None` for bytes
    /// that are not a load state.
    pub fn decide(&self, stored: Option<&[u8]>, now: Micros, draw: u64) -> Option<LoadDecision> {
        let Some(bytes) = stored else {
            return Some(LoadDecision {
                level: 0,
                admitted: true,
                retry: Micros::ZERO,
            });
        };
        // While the stored standing stands, its header says all a decision needs.
        if let Some((standing, retry)) = LoadStateBytes(bytes).standing(now) {
            return Some(LoadDecision {
                level: standing.level,
                admitted: admits(standing.share(self.priority.index(), now), draw),
                retry,
            });
        }
        Some(LoadState::decode(bytes)?.decide(self.priority, now, draw))
    }
}
