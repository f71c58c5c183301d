//! Whether anything receives what a write propagates, so that a write can skip building its
//! effect when nothing would.
//!
//! Redis itself drops propagated commands when there is no AOF and no replication stream
//! (no replica and no replication backlog), but `RedisModule_Replicate` still looks the
//! command up by name and builds its arguments first: a quarter of a call's instructions.
//! When nothing listens, a write calls `RedisModule_ReplicateVerbatim` instead, which Redis
//! drops at once too, and which still counts the change (`rdb_changes_since_last_save`, so
//! `save` points fire).
//!
//! What listens is judged conservatively, so that a replica or an AOF never misses an
//! effect: the AOF is asked on every call (a context flag); a replica or a backlog is
//! assumed from the first sign of one on, for good: a `SYNC` or `PSYNC` (seen by a command
//! filter, before Redis creates the backlog), any change of role (a replica keeps its
//! backlog when promoted), or, when the module loads into a running server, `INFO
//! replication` showing any. A cluster node is a listener from the start: a slot migration
//! streams its writes like a replication link.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use crate::redis::settings;

/// Whether this server may feed replicas, now or later, from a backlog.
static REPLICATION_SEEN: AtomicBool = AtomicBool::new(false);

/// Whether this server may feed replicas, now or later: then every write builds its
/// effect, whatever the context flags say.
pub fn replication_seen() -> bool {
    REPLICATION_SEEN.load(Ordering::Relaxed)
}

/// Whether a client's write must build its effect, when that is known without the context
/// flags: once replication has been seen, or while the AOF setting is followed
/// ([`settings`]). A replica has seen replication (its role), and a server loading its AOF
/// has the AOF on; a server loading anything else runs no command.
pub fn effects_known() -> Option<bool> {
    if replication_seen() {
        Some(true)
    } else if settings::followed() {
        Some(settings::aof_on())
    } else {
        None
    }
}

/// Starts watching for replication, from OnLoad. Without the APIs it needs (or if any
/// step fails), every write builds its effect, as if a replica listened.
///
/// A cluster node always builds effects: any slot it serves may be migrated atomically at
/// any time (Valkey 9's `CLUSTER MIGRATESLOTS`, Redis 8.4's `CLUSTER MIGRATION`), and the
/// server then sends the slot's writes to the target as it sends them to replicas, even with
/// no replica attached: they must be effects, never the commands themselves.
pub fn watch(ctx: *mut raw::RedisModuleCtx) {
    // SAFETY: a function pointer Redis filled in at load, called from OnLoad.
    let flags = unsafe { raw::RedisModule_GetContextFlags.unwrap()(ctx) } as u32;
    let cluster = flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0;
    if cluster || !(filter_registered(ctx) && role_changes_watched(ctx) && no_replication_yet(ctx))
    {
        REPLICATION_SEEN.store(true, Ordering::Relaxed);
    }
}

fn filter_registered(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: a function pointer Redis filled in at load, called from OnLoad.
    let Some(register) = (unsafe { raw::RedisModule_RegisterCommandFilter }) else {
        return false;
    };
    // SAFETY: called from OnLoad with its context; `on_command` is a filter callback.
    let filter = unsafe {
        register(
            ctx,
            Some(on_command),
            raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
        )
    };
    // SAFETY: function pointers the server filled in at load, only read.
    let (arg_get, args_count) = unsafe {
        (
            raw::RedisModule_CommandFilterArgGet,
            raw::RedisModule_CommandFilterArgsCount,
        )
    };
    !filter.is_null() && arg_get.is_some() && args_count.is_some()
}

fn role_changes_watched(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: as above.
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else {
        return false;
    };
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        dataver: 1,
    };
    // SAFETY: called from OnLoad with its context; `on_role_change` is an event callback.
    unsafe { subscribe(ctx, event, Some(on_role_change)) == raw::Status::Ok as c_int }
}

/// When the module loads into a running server: whether it has neither replicas nor a
/// backlog, and is a master.
fn no_replication_yet(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: function pointers Redis filled in at load; the info is freed once.
    unsafe {
        let (Some(get), Some(signed), Some(text), Some(free)) = (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_ServerInfoGetFieldSigned,
            raw::RedisModule_ServerInfoGetFieldC,
            raw::RedisModule_FreeServerInfo,
        ) else {
            return false;
        };
        let info = get(ctx, c"replication".as_ptr());
        if info.is_null() {
            return false;
        }
        let mut error = 0;
        let replicas = signed(info, c"connected_slaves".as_ptr(), &mut error);
        let replicas_known = error == 0;
        let backlog = signed(info, c"repl_backlog_active".as_ptr(), &mut error);
        let backlog_known = error == 0;
        let role = text(info, c"role".as_ptr());
        let master = !role.is_null() && CStr::from_ptr(role) == c"master";
        free(ctx, info);
        replicas_known && backlog_known && replicas == 0 && backlog == 0 && master
    }
}

/// A command filter: notes a replica asking for the replication stream.
unsafe extern "C" fn on_command(filter: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: Redis' filter context, during the callback; the name is read, not kept.
    let _ = std::panic::catch_unwind(|| unsafe {
        if raw::RedisModule_CommandFilterArgsCount.unwrap()(filter) < 1 {
            return;
        }
        let name = raw::RedisModule_CommandFilterArgGet.unwrap()(filter, 0);
        let mut len = 0;
        let ptr = raw::RedisModule_StringPtrLen.unwrap()(name, &mut len);
        if ptr.is_null() || !(4..=5).contains(&len) {
            return;
        }
        let name = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
        if name.eq_ignore_ascii_case(b"psync") || name.eq_ignore_ascii_case(b"sync") {
            REPLICATION_SEEN.store(true, Ordering::Relaxed);
        }
    });
}

/// A server event: this server became a replica or a master.
unsafe extern "C" fn on_role_change(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    REPLICATION_SEEN.store(true, Ordering::Relaxed);
}
