//! The server's clock, read once per command, on the master only: replicas and AOF replays
//! apply the master's absolute times and never read a clock of their own.

use crate::core::time::Micros;
use crate::redis::api;

/// Microseconds since the epoch at which readings are capped (2^63 - 1 ns, in 2262), so that
/// every instant a limiter derives from the clock stays representable.
pub const LATEST_MICROS: i64 = i64::MAX / 1_000;

/// The current time since the Unix epoch. On Redis 7.2+ and Valkey this is the server's
/// cached command time, the instant the server itself uses for expiry, constant through a
/// command, a MULTI/EXEC or a script; on 7.0 it is the real-time clock.
pub fn now() -> Micros {
    let micros = api::cached_microseconds().unwrap_or_else(realtime_micros);
    Micros::saturating(micros.clamp(0, LATEST_MICROS))
}

fn realtime_micros() -> i64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer; CLOCK_REALTIME cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    now.tv_sec
        .saturating_mul(1_000_000)
        .saturating_add(now.tv_nsec / 1_000)
}
