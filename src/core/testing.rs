//! Test helpers shared by the cores' tests: a key holding one limiter's state as the Redis
//! layer keeps it (a string or a log, with its expiry), driven by a controlled clock.

use super::gcra::Gcra;
use super::limiter::{commit_log, decide_log, decide_string, Limiter, LogWrite, StringWrite};
use super::log::{LogLimiter, SlidingLog};
use super::request::{Action, Request};
use super::time::{Rounding, Unit};
use super::verdict::Verdict;
use super::window::{Algorithm, Scratch, WindowLimiter};

/// 2023-11-14T22:13:20Z in µs: a multiple of every window used here.
pub const T0: i64 = 1_700_000_000_000_000;

/// A key holding one limiter's state, as the Redis layer keeps it: a string or a log, with
/// its expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stored {
    Missing,
    String(Vec<u8>, i64),
    Log(SlidingLog, i64),
}

/// One limiter on one key, driven by a controlled clock.
#[derive(Clone, Debug)]
pub struct Key {
    pub limiter: Limiter,
    pub stored: Stored,
}

impl Key {
    pub fn new(limiter: Limiter) -> Key {
        Key {
            limiter,
            stored: Stored::Missing,
        }
    }

    /// The key as Redis sees it at `now`: gone once expired.
    pub fn live(&self, now: i64) -> Stored {
        match &self.stored {
            Stored::String(_, expire) | Stored::Log(_, expire) if expire * 1_000 <= now => {
                Stored::Missing
            }
            stored => stored.clone(),
        }
    }

    /// Decides without storing anything: what a `_RO` variant replies.
    pub fn dry(&self, now: i64, request: Request) -> Verdict {
        match (&self.limiter, self.live(now)) {
            (Limiter::Log(log), Stored::Log(stored, _)) => {
                decide_log(log, Some(&stored), now, &request).0
            }
            (Limiter::Log(log), _) => decide_log(log, None, now, &request).0,
            (limiter, stored) => {
                let value = match &stored {
                    Stored::String(value, _) => Some(value.as_slice()),
                    _ => None,
                };
                decide_string(
                    limiter,
                    value,
                    now,
                    &request,
                    &mut Scratch::default(),
                    &mut Vec::new(),
                )
                .unwrap()
                .verdict
            }
        }
    }

    /// One call that stores what it decides, as the writing commands do.
    pub fn call(&mut self, now: i64, request: Request) -> Verdict {
        let stored = self.live(now);
        match self.limiter {
            Limiter::Log(limiter) => {
                let mut log = match stored {
                    Stored::Log(log, _) => Some(log),
                    _ => None,
                };
                let (mut verdict, write) = decide_log(&limiter, log.as_ref(), now, &request);
                if write == LogWrite::Nothing {
                    return verdict;
                }
                let mut log = log.take().unwrap_or_default();
                let commit = commit_log(&limiter, &mut log, now, &request, write, &mut verdict);
                self.stored = if commit.delete {
                    Stored::Missing
                } else {
                    assert!(commit.expire_at_ms * 1_000 > now, "a TTL of zero or less");
                    Stored::Log(log, commit.expire_at_ms)
                };
                verdict
            }
            limiter => {
                let value = match &stored {
                    Stored::String(value, _) => Some(value.clone()),
                    _ => None,
                };
                let mut new_value = Vec::new();
                let decision = decide_string(
                    &limiter,
                    value.as_deref(),
                    now,
                    &request,
                    &mut Scratch::default(),
                    &mut new_value,
                )
                .unwrap();
                match decision.write {
                    StringWrite::Nothing => {}
                    StringWrite::Delete => self.stored = Stored::Missing,
                    StringWrite::Store {
                        expire_at_ms,
                        placement,
                    } => {
                        assert!(expire_at_ms * 1_000 > now, "a TTL of zero or less");
                        if placement.expiry_kept {
                            let Stored::String(_, kept) = stored else {
                                panic!("an expiry kept on a missing key")
                            };
                            assert_eq!(kept, expire_at_ms, "an expiry kept that moved");
                        }
                        let new_value = placement.place(value.as_deref(), &new_value);
                        self.stored = Stored::String(new_value, expire_at_ms);
                    }
                }
                decision.verdict
            }
        }
    }

    pub fn reply(&mut self, now: i64, request: Request) -> [i64; 5] {
        self.call(now, request)
            .to_reply(Unit::Milliseconds, Rounding::Up)
    }
}

pub fn take(quantity: u64) -> Request {
    Request::take(quantity)
}

pub fn refund(quantity: u64) -> Request {
    Request {
        action: Action::Refund,
        quantity,
        block: None,
    }
}

pub fn blocking(quantity: u64, block_ms: i64) -> Request {
    Request {
        block: Some(block_ms * 1_000),
        ..take(quantity)
    }
}

pub fn ms(millis: i64) -> i64 {
    millis * 1_000
}

/// Every algorithm, 5 per second (GCRA: bursts of 5, one every 200 ms).
pub fn every_algorithm() -> Vec<Limiter> {
    let window = |algorithm| {
        Limiter::Window(WindowLimiter::new(5, 1_000, Unit::Milliseconds, algorithm).unwrap())
    };
    vec![
        Limiter::Throttle(Gcra::new(4, 5, 1_000, Unit::Milliseconds).unwrap()),
        window(Algorithm::Fixed),
        window(Algorithm::Sliding),
        window(Algorithm::Buckets(4)),
        Limiter::Log(LogLimiter::new(5, 1_000, Unit::Milliseconds).unwrap()),
    ]
}
