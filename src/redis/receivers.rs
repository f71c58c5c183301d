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

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use crate::redis::api::{self, Ctx, FilterCtx, ServerEvent, ServerInfo};
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
pub fn watch(ctx: Ctx<'_>) {
    let cluster = api::context_flags(ctx) & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0;
    if cluster || !(filter_registered(ctx) && role_changes_watched(ctx) && no_replication_yet(ctx))
    {
        REPLICATION_SEEN.store(true, Ordering::Relaxed);
    }
}

fn filter_registered(ctx: Ctx<'_>) -> bool {
    api::register_command_filter(ctx, on_command)
}

fn role_changes_watched(ctx: Ctx<'_>) -> bool {
    let event = raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED;
    api::subscribe_to_server_event(ctx, event, on_role_change)
}

/// When the module loads into a running server: whether it has neither replicas nor a
/// backlog, and is a master.
fn no_replication_yet(ctx: Ctx<'_>) -> bool {
    let Some(info) = ServerInfo::read(ctx, c"replication") else {
        return false;
    };
    let replicas = info.signed(c"connected_slaves");
    let backlog = info.signed(c"repl_backlog_active");
    let master = info.text(c"role").as_deref() == Some(b"master");
    replicas == Some(0) && backlog == Some(0) && master
}

/// A command filter: notes a replica asking for the replication stream.
unsafe extern "C" fn on_command(filter: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: the server's filter context, alive during the callback.
    let Some(filter) = (unsafe { FilterCtx::from_raw(filter) }) else {
        return;
    };
    let _ = std::panic::catch_unwind(|| {
        let Some(name) =
            api::filter_arg_get(filter, 0).filter(|_| api::filter_args_count(filter) > 0)
        else {
            return;
        };
        let name = name.bytes();
        if name.eq_ignore_ascii_case(b"psync") || name.eq_ignore_ascii_case(b"sync") {
            REPLICATION_SEEN.store(true, Ordering::Relaxed);
        }
    });
}

/// A server event: this server became a replica or a master.
unsafe extern "C" fn on_role_change(
    _ctx: *mut raw::RedisModuleCtx,
    _event: ServerEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    REPLICATION_SEEN.store(true, Ordering::Relaxed);
}
