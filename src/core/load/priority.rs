//! The priority classes a load level sheds by, and the share of each it admits.

/// The priority classes, most important first (Google's criticality).
pub const PRIORITIES: [&str; 4] = ["critical_plus", "critical", "sheddable_plus", "sheddable"];

/// A share, in parts of 10,000: 10,000 admits everything.
pub const WHOLE: u16 = 10_000;

/// A priority class: 0 (`critical_plus`) to 3 (`sheddable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Priority(u8);

impl Priority {
    /// The class named `name` (case-insensitive) or numbered 0 to 3.
    pub fn parse(name: &[u8]) -> Option<Priority> {
        if let [digit @ b'0'..=b'3'] = name {
            return Some(Priority(digit - b'0'));
        }
        PRIORITIES
            .iter()
            .position(|class| class.as_bytes().eq_ignore_ascii_case(name))
            .map(|index| Priority(index as u8))
    }

    /// Its number, 0 (most important) to 3.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// Whether a share of `share` parts of [`WHOLE`] admits the request that drew `draw`.
pub fn admits(share: u16, draw: u64) -> bool {
    (draw % u64::from(WHOLE)) < u64::from(share)
}
