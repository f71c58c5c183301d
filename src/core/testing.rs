//! Test helpers shared by the cores' tests: one limiter on one key of an in-memory store,
//! called through the engine as the commands call it, along a controlled clock.

use super::engine::memory::{Entry, Memory};
use super::engine::{Call, Settled};
use super::gcra::Gcra;
use super::limiter::Limiter;
use super::log::LogLimiter;
use super::request::{Request, Shortfall};
use super::time::{Micros, Rounding, Unit};
use super::verdict::Verdict;
use super::windows::{Algorithm, WindowLimiter};

/// 2023-11-14T22:13:20Z: a multiple of every window used here.
pub const T0: Micros = Micros::saturating(1_700_000_000_000_000);

/// What a key holds: `None` when it does not exist.
pub type Stored = Option<Entry>;

/// The key's name in its store.
const NAME: &str = "key";

/// One limiter on one key, driven by a controlled clock.
#[derive(Clone, Debug)]
pub struct Key {
    pub limiter: Limiter,
    memory: Memory,
}

impl Key {
    pub fn new(limiter: Limiter) -> Key {
        Key {
            limiter,
            memory: Memory::new(),
        }
    }

    /// What the key holds, expired or not.
    pub fn stored(&self) -> Stored {
        self.memory.snapshot().remove(NAME)
    }

    /// The key as the server sees it at `now`: gone once expired.
    pub fn live(&self, now: Micros) -> Stored {
        self.memory.get(NAME, now)
    }

    fn run(&self, now: Micros, request: Request, write: bool) -> Verdict {
        let call = Call {
            limiters: std::slice::from_ref(&self.limiter),
            request,
            now,
            write,
            seed: now.get() as u64,
        };
        self.memory
            .run(&[NAME], &call)
            .expect("the key holds the limiter's state")[0]
    }

    /// One call, with what it settled: the wait (`DELAY`), the quantity granted, a debt.
    pub fn settle(&mut self, now: Micros, request: Request, write: bool) -> (Verdict, Settled) {
        let call = Call {
            limiters: std::slice::from_ref(&self.limiter),
            request,
            now,
            write,
            seed: now.get() as u64,
        };
        let (verdicts, settled) = self
            .memory
            .run_settled(&[NAME], &call)
            .expect("the key holds the limiter's state");
        (verdicts[0], settled)
    }

    /// Stores `value` as the key's whole value, expiring at `expire_at`: a state another
    /// release (or module) wrote.
    pub fn memory_set(&mut self, value: &[u8], expire_at: Micros) {
        let effect = super::effect::Effect::Set {
            value,
            expire_at: expire_at.ceil_millis(),
        };
        self.memory.seed(NAME, &effect);
    }

    /// Decides without storing anything: what a `_RO` variant replies.
    pub fn dry(&self, now: Micros, request: Request) -> Verdict {
        self.run(now, request, false)
    }

    /// One call that stores what it decides, as the writing commands do.
    pub fn call(&mut self, now: Micros, request: Request) -> Verdict {
        self.run(now, request, true)
    }

    pub fn reply(&mut self, now: Micros, request: Request) -> [i64; 5] {
        self.call(now, request)
            .to_reply(Unit::Milliseconds, Rounding::Up)
    }
}

pub fn take(quantity: u64) -> Request {
    Request::take(quantity)
}

pub fn refund(quantity: u64) -> Request {
    Request::refund(quantity)
}

pub fn blocking(quantity: u64, block_ms: i64) -> Request {
    Request {
        block: Some(ms(block_ms)),
        ..take(quantity)
    }
}

/// `AT_MOST`, with a block should nothing fit.
pub fn at_most_blocking(quantity: u64, block_ms: i64) -> Request {
    Request {
        shortfall: Shortfall::AtMost,
        ..blocking(quantity, block_ms)
    }
}

pub fn ms(millis: i64) -> Micros {
    Micros::saturating(millis * 1_000)
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
