#!/bin/sh
# lua-resty-limit-traffic's own test suite (t/, under openresty/test-nginx) run against this
# package, changed only as a user switching would change it: each `require "resty.limit.X"`
# names `resty.ratelimit_module.X`, and each `new()`'s first argument, a shared dict's name,
# becomes a table of Redis options whose prefix stands for that dict in that test (and that
# request: the original's tests flush their dict at the start of each request, and
# test-nginx runs each test twice).
#
#   tests/peer/lua-resty-limit-traffic.sh <lua-resty-limit-traffic checkout> <test-nginx checkout>
#
# Neither project is part of this repository: fetch them, check them out, and give their
# paths. Needs prove and test-nginx's Perl modules (Debian: libtest-base-perl
# libtext-diff-perl liblist-moreutils-perl libtest-longstring-perl liburi-perl
# libhttp-message-perl libipc-run-perl), nginx with the Lua module, redis-server, and the
# module built (target/release, or $RATELIMIT_MODULE). With ORIGINAL=1 it runs the
# original package's tests unchanged, for comparison. docs/nginx.md lists the differences.
set -eu
[ $# -eq 2 ] || { sed -n '2,16p' "$0"; exit 2; }
peer=$(cd "$1" && pwd)
test_nginx=$(cd "$2" && pwd)
modules=${NGINX_MODULES:-/usr/lib/nginx/modules}
. "$(dirname "$0")/server.sh"
start_server
mkdir "$work/t"
if [ "${ORIGINAL:-0}" = 1 ]; then
    cp "$peer"/t/*.t "$work/t/"
    lib="$peer/lib"
else
    python3 - "$peer/t" "$work/t" <<'PY'
import pathlib, re, sys
source, target = map(pathlib.Path, sys.argv[1:])
for path in sorted(source.glob("*.t")):
    number, lines = 0, []
    for line in path.read_text().splitlines(keepends=True):
        test = re.match(r"=== TEST (\d+):", line)
        if test:
            number = int(test.group(1))
        line = re.sub(r'require "resty\.limit\.(\w+)"', r'require "resty.ratelimit_module.\1"', line)
        line = re.sub(
            r'(limit_\w+)\.new\("(\w+)"',
            lambda m: f'{m.group(1)}.new({{port = $TEST_NGINX_REDIS_PORT, '
            f'prefix = "{path.stem}-{number}:{m.group(2)}:" .. ngx.var.request_id .. ":"}}',
            line,
        )
        lines.append(line)
    (target / path.name).write_text("".join(lines))
PY
    lib="$root/clients/lua/lib"
fi
# The suite's lua_package_path names its own lib/: point it at the package under test.
sed -i "s|\$pwd/lib/?.lua|$lib/?.lua|" "$work"/t/*.t
cd "$work"
TEST_NGINX_REDIS_PORT=$port \
TEST_NGINX_LOAD_MODULES="$modules/ndk_http_module.so $modules/ngx_http_lua_module.so" \
PATH=/usr/sbin:$PATH \
    prove -I "$test_nginx/lib" t/ 2>&1 | tee "$work/prove.log" || true
# Some of the suite's tests fail by design (docs/nginx.md says why), so prove's status says nothing; a run in
# which no test ran (test-nginx's Perl modules missing) does, and fails.
if grep -q "Tests=0," "$work/prove.log"; then
    echo "no test ran: are test-nginx's Perl modules installed?" >&2
    exit 1
fi
