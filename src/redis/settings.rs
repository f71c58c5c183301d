//! Server settings the module follows through `CONFIG SET`, so that a write reads them from
//! memory instead of asking Redis on every call: whether a `maxmemory` limit is set (then a
//! write checks Redis' memory state, see `LimiterKey::open`) and whether the AOF is on (then
//! a write builds its effect, see [`super::receivers`]).
//!
//! Both only change with `CONFIG SET`, which fires a server event naming what changed; they
//! are read at load and again when named. Without that event, or when a setting cannot be
//! read, the module asks Redis on every write, as if it kept no copy.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use crate::redis::api::{self, ConfigChange, Ctx, ServerEvent, ServerInfo};

/// Whether the settings below are followed; false until they are read at load.
static FOLLOWED: AtomicBool = AtomicBool::new(false);
/// Whether `maxmemory` may be set.
static MAXMEMORY_SET: AtomicBool = AtomicBool::new(true);
/// Whether the AOF may be on.
static AOF_ON: AtomicBool = AtomicBool::new(true);

/// Whether [`maxmemory_set`] and [`aof_on`] follow the server's settings; when not, a write
/// asks Redis.
pub fn followed() -> bool {
    FOLLOWED.load(Ordering::Relaxed)
}

/// Whether a `maxmemory` limit may be set (true when not followed).
pub fn maxmemory_set() -> bool {
    MAXMEMORY_SET.load(Ordering::Relaxed)
}

/// Whether the AOF may be on (true when not followed).
pub fn aof_on() -> bool {
    AOF_ON.load(Ordering::Relaxed)
}

/// How much of `maxmemory` the server uses (1 or more: at or over the limit); 1 when the
/// server cannot tell.
pub fn used_memory_ratio() -> f32 {
    api::used_memory_ratio()
}

/// Reads the settings and follows their changes, from OnLoad.
pub fn watch(ctx: Ctx<'_>) {
    if api::subscribe_to_server_event(ctx, raw::REDISMODULE_EVENT_CONFIG, on_config_change) {
        refresh(ctx);
    }
}

/// Reads both settings; when either cannot be read, writes ask Redis from then on.
fn refresh(ctx: Ctx<'_>) {
    let maxmemory = unsigned_field(ctx, c"memory", c"maxmemory");
    let aof = unsigned_field(ctx, c"persistence", c"aof_enabled");
    let (Some(maxmemory), Some(aof)) = (maxmemory, aof) else {
        // No copy kept: both back to the safe side (true), as `maxmemory_set` and `aof_on`
        // promise when not followed; a write then asks Redis.
        FOLLOWED.store(false, Ordering::Relaxed);
        MAXMEMORY_SET.store(true, Ordering::Relaxed);
        AOF_ON.store(true, Ordering::Relaxed);
        return;
    };
    MAXMEMORY_SET.store(maxmemory > 0, Ordering::Relaxed);
    AOF_ON.store(aof != 0, Ordering::Relaxed);
    FOLLOWED.store(true, Ordering::Relaxed);
}

/// An unsigned field of an `INFO` section.
fn unsigned_field(ctx: Ctx<'_>, section: &CStr, field: &CStr) -> Option<u64> {
    ServerInfo::read(ctx, section)?.unsigned(field)
}

/// A server event: settings changed (`CONFIG SET`). Either followed one named: read both
/// again.
unsafe extern "C" fn on_config_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: ServerEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    // SAFETY: the event's context, alive during the callback.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: for this event Redis passes a RedisModuleConfigChange, valid during the
        // callback, naming each changed setting.
        let followed_changed = unsafe {
            let change = data.cast::<ConfigChange>();
            if change.is_null() || (*change).config_names.is_null() {
                // Nothing to read the names from.
                true
            } else {
                let names = std::slice::from_raw_parts(
                    (*change).config_names,
                    (*change).num_changes as usize,
                );
                names.iter().any(|&name| {
                    !name.is_null()
                        && matches!(
                            CStr::from_ptr(name).to_bytes(),
                            b"maxmemory" | b"appendonly"
                        )
                })
            }
        };
        if followed_changed {
            refresh(ctx);
        }
    });
}
