#!/bin/sh
# go-redis/redis_rate's own tests (rate_test.go, v10) run against this package's drop-in: the
# import of github.com/go-redis/redis_rate/v10 names github.com/redisratelimit/ratelimit/redis_rate,
# and nothing else changes (they use a go-redis Ring on :6379 and flush it, so a server with the
# module is started on 6379, which must be free).
#
#   tests/peer/go-redis-rate.sh <go-redis/redis_rate checkout>
#
# The checkout is not part of this repository: fetch it and give its path. Needs go,
# redis-server and the module built (target/release, or $RATELIMIT_MODULE).
set -eu
[ $# -eq 1 ] || { sed -n '2,10p' "$0"; exit 2; }
peer=$(cd "$1" && pwd)
. "$(dirname "$0")/server.sh"
port=6379
start_server
sed 's|"github.com/go-redis/redis_rate/v10"|"github.com/redisratelimit/ratelimit/redis_rate"|' \
    "$peer/rate_test.go" > "$work/rate_test.go"
cat > "$work/go.mod" <<MOD
module peer/redis_rate

go 1.26.0

require github.com/redisratelimit/ratelimit v0.0.0

replace github.com/redisratelimit/ratelimit => $root/clients/go
MOD
cd "$work"
go get github.com/stretchr/testify@v1.8.1 >/dev/null 2>&1
go mod tidy >/dev/null 2>&1
go test -count=1 -v . | grep -E '^(--- |ok|FAIL|PASS)'
