# Sourced by the scripts beside it: a scratch directory ($work) and a server with the module
# on a free loopback port ($port), both gone when the script exits. `start_server` starts it
# and waits until it answers (the log printed if it never does).
root=$(cd "$(dirname "$0")/../.." && pwd)
module=${RATELIMIT_MODULE:-$root/target/release/libredis_ratelimit.so}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cleanup() {
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

start_server() {
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
        --dir "$work" --logfile "$work/redis.log" --loadmodule "$module"
    tries=0
    until redis-cli -p "$port" ping >/dev/null 2>&1; do
        tries=$((tries + 1))
        [ "$tries" -lt 100 ] || { cat "$work/redis.log"; exit 1; }
        sleep 0.1
    done
}
