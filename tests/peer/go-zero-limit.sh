#!/bin/sh
# go-zero's own core/limit tests (periodlimit_test.go, tokenlimit_test.go) run against this
# package's drop-in: they are internal tests of package limit, so they run in a copy of the
# drop-in's sources, and their in-process Redis (alicebob/miniredis, and go-zero's redistest
# over it) is a real redis-server with the module for each test, on a free port, that Close
# stops and Restart starts again. Nothing else of the tests changes.
#
#   tests/peer/go-zero-limit.sh <zeromicro/go-zero checkout>
#
# The checkout is not part of this repository: fetch it and give its path. Needs go,
# redis-server and the module built (target/release, or $RATELIMIT_MODULE).
set -eu
[ $# -eq 1 ] || { sed -n '2,11p' "$0"; exit 2; }
peer=$(cd "$1" && pwd)
. "$(dirname "$0")/server.sh"
mkdir -p "$work/limit" "$work/miniredis" "$work/redistest"
cp "$root"/clients/go/gozero/limit/*.go "$work/limit/"
rm -f "$work"/limit/*_test.go
for test in periodlimit_test.go tokenlimit_test.go; do
    sed -e 's|"github.com/alicebob/miniredis/v2"|"peer/gozero/miniredis"|' \
        -e 's|"github.com/zeromicro/go-zero/core/stores/redis/redistest"|"peer/gozero/redistest"|' \
        "$peer/core/limit/$test" > "$work/limit/$test"
done
cat > "$work/miniredis/miniredis.go" <<'GO'
// Package miniredis stands in for alicebob/miniredis: a real redis-server with the module.
package miniredis

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

type Miniredis struct {
	port int
	cmd  *exec.Cmd
}

func (m *Miniredis) start() error {
	m.cmd = exec.Command("redis-server", "--port", fmt.Sprint(m.port), "--bind", "127.0.0.1",
		"--save", "", "--loadmodule", os.Getenv("RATELIMIT_MODULE"))
	if err := m.cmd.Start(); err != nil {
		return err
	}
	for range 250 {
		if conn, err := net.Dial("tcp", m.Addr()); err == nil {
			conn.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis-server did not start")
}

func Run() (*Miniredis, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &Miniredis{port: listener.Addr().(*net.TCPAddr).Port}
	listener.Close()
	return m, m.start()
}

func RunT(t *testing.T) *Miniredis {
	m, err := Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func (m *Miniredis) Addr() string { return fmt.Sprintf("127.0.0.1:%d", m.port) }

func (m *Miniredis) Close() {
	if m.cmd != nil {
		m.cmd.Process.Kill()
		m.cmd.Wait()
		m.cmd = nil
	}
}

func (m *Miniredis) Restart() error { return m.start() }
GO
cat > "$work/redistest/redistest.go" <<'GO'
// Package redistest stands in for go-zero's: a go-zero Redis on a real server.
package redistest

import (
	"testing"

	"github.com/zeromicro/go-zero/core/stores/redis"
	"peer/gozero/miniredis"
)

func CreateRedis(t *testing.T) *redis.Redis {
	return redis.New(miniredis.RunT(t).Addr())
}
GO
version=$(cd "$peer" && git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null || echo v1.10.3)
cat > "$work/go.mod" <<MOD
module peer/gozero

go 1.26.0

require github.com/redisratelimit/ratelimit v0.0.0

replace github.com/redisratelimit/ratelimit => $root/clients/go
MOD
cd "$work"
go get "github.com/zeromicro/go-zero@$version" github.com/stretchr/testify >/dev/null 2>&1
go mod tidy >/dev/null 2>&1
RATELIMIT_MODULE=$module go test -count=1 -v ./limit/ | grep -E '^(--- |ok|FAIL|PASS)'
