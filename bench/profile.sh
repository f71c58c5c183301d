#!/bin/sh
# Where a command's instructions go: one workload on a master under callgrind, with a replica
# attached (as `make bench` measures), then the functions of each part of a call, per request.
#
#   bench/profile.sh CL.THROTTLE key:__rand_int__ 15 1 3600
#   bench/profile.sh SET key:__rand_int__ 1700000000000000000 PX 3600000
#
# The arguments are a redis-benchmark command (__rand_int__ takes 100,000 random values).
# Needs valgrind, redis-server and redis-benchmark. The environment may set MODULE (another
# build, target/release's by default), REPLICA=0 (no replica: the module then builds no
# effects), WARMUP=<requests> sent before counting (a hot key's log already long) and
# KEEP=<file> (a copy of callgrind's dump there, for callgrind_annotate: line by line with a
# build made with CARGO_PROFILE_RELEASE_DEBUG=line-tables-only).
set -eu
[ $# -gt 0 ] || { sed -n '2,13p' "$0"; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
module=${MODULE:-$root/target/release/libredis_ratelimit.so}
with_replica=${REPLICA:-1}
warmup=${WARMUP:-0}
requests=20000
work=$(mktemp -d)
master=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
replica=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cleanup() {
    redis-cli -p "$replica" shutdown nosave >/dev/null 2>&1 || true
    redis-cli -p "$master" shutdown nosave >/dev/null 2>&1 || true
    sleep 1
    rm -rf "$work"
}
trap cleanup EXIT
# Waits up to 60 s for `$1` to hold (valgrind starts a server slowly), or prints `$2` and fails.
wait_for() {
    tries=0
    until sh -c "$1" >/dev/null 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -gt 300 ]; then
            echo "gave up waiting for: $1" >&2
            tail -n 20 "$2" >&2
            exit 1
        fi
        sleep 0.2
    done
}
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" \
    redis-server --port "$master" --save "" --dir "$work" --logfile "$work/master.log" \
    --repl-diskless-sync-delay 0 --loadmodule "$module" >"$work/valgrind.log" 2>&1 &
wait_for "redis-cli -p $master ping | grep -q PONG" "$work/master.log"
setup="a replica attached"
if [ "$with_replica" != 0 ]; then
    redis-server --port "$replica" --save "" --dir "$work" --dbfilename replica.rdb \
        --logfile "$work/replica.log" --replicaof 127.0.0.1 "$master" --loadmodule "$module" \
        --daemonize yes
    wait_for "redis-cli -p $replica info replication | grep -q master_link_status:up" \
        "$work/replica.log"
else
    setup="no replica"
fi
if [ "$warmup" -gt 0 ]; then
    redis-benchmark -p "$master" -n "$warmup" -c 50 -P 16 -r 100000 -q "$@" >/dev/null
fi
pid=$(pgrep -f "valgrind.*--port $master" | head -n 1)
callgrind_control -z "$pid" >/dev/null
redis-benchmark -p "$master" -n "$requests" -c 50 -P 16 -r 100000 -q "$@" >/dev/null
callgrind_control -d "$pid" >/dev/null
sleep 1
dump=$(ls -t "$work"/callgrind.out.* | head -n 1)
if [ -n "${KEEP:-}" ]; then cp "$dump" "$KEEP"; fi
# The total, less every call of the command table's name comparison (its count follows a
# hash seed drawn at each start; bench/run.py leaves it out the same way).
total=$(awk '
    pending { uncounted += $2; pending = 0; next }
    /^totals:/ { total = $2 }
    /^c?fn=\(/ {
        id = $1; sub(/^c?fn=/, "", id)
        if (NF > 1) name[id] = $2
        if ($1 ~ /^cfn=/) callee = name[id]
    }
    # The line after a call is its position and inclusive cost.
    /^calls=/ { pending = (callee == "dictSdsKeyCaseCompare"); next }
    END { print total - uncounted }' "$dump")
echo "$* : $((total / requests)) instructions per request, $setup"
# Inclusive cost per request of the functions that make up a call.
callgrind_annotate --inclusive=yes --threshold=100 "$dump" 2>/dev/null \
    | sed -n 's/^ *\([0-9,]*\) ([ 0-9.]*%) *[^:]*:\([A-Za-z_][A-Za-z0-9_:<> ]*\) .*/\1 \2/p' \
    | awk -v n="$requests" '{ gsub(",", "", $1); printf "%8d  %s\n", $1 / n, $2 }' \
    | grep -E ' (processMultibulkBuffer|call|setCommand|setKey|setExpire|rewriteClientCommandVector|propagatePendingCommands|RedisModuleCommandDispatcher|moduleCreateContext|moduleFreeContext|RM_[A-Za-z]+|lookupCommandByCString|moduleCreateArgvFromUserFormat|alsoPropagate|addReply[A-Za-z]*)$' \
    | head -n 40
