#!/bin/sh
# express-rate-limit's own library tests (test/library, jest) run against this package's Store:
# the checkout's default store, source/memory-store.ts, becomes a class of the same name that
# is the package's RateLimitModuleStore, each instance on a key prefix of its own, on a live
# server with the module. Nothing else of the tests changes. With ORIGINAL=1 it runs them
# unchanged, with express-rate-limit's own MemoryStore, for comparison.
#
#   tests/peer/express-rate-limit.sh <express-rate-limit checkout>
#
# The checkout is not part of this repository: fetch it and give its path (it is copied).
# Needs node and npm (its test dependencies are installed into the copy), redis-server, the
# module built and the Node package's dependencies (make test installs them). docs/clients.md
# lists the differences.
set -eu
[ $# -eq 1 ] || { sed -n '2,13p' "$0"; exit 2; }
. "$(dirname "$0")/server.sh"
cp -r "$1/." "$work/"
cd "$work"
# Only what the library tests need (its other dev tools are left out).
python3 - <<'PY'
import json
package = json.load(open("package.json"))
package["devDependencies"] = {}
json.dump(package, open("package.json", "w"), indent=1)
PY
npm install --no-save --no-audit --no-fund --ignore-scripts jest@30 ts-jest@29 @jest/globals@30 \
    @types/jest@30 @types/node @types/express@5 @types/supertest express@5 supertest \
    ratelimit-header-parser@0.1.0 typescript@5 @express-rate-limit/tsconfig ts-node@10 \
    @types/debug >/dev/null
if [ "${ORIGINAL:-0}" != 1 ]; then
    cat > source/memory-store.ts <<TS
/* eslint-disable */
declare const require: any
declare const process: any
const { RateLimitModuleStore } = require('$root/clients/node/express.js')
const Redis = require('$root/clients/node/node_modules/ioredis')

let counter = 0
// One connection, made when the module loads: before a test fakes the timers.
const shared = new Redis(process.env.REDIS_URL)

export class MemoryStore extends RateLimitModuleStore {
	declare init: any
	declare get: any
	declare increment: any
	declare decrement: any
	declare resetKey: any
	declare localKeys: any
	constructor(_validations?: any) {
		super({ client: shared, prefix: \`erl:\${process.pid}:\${Date.now()}:\${counter++}:\` })
	}

	shutdown(): void {}
}
TS
fi
start_server
# A test of the store's internals under fake timers waits out its whole timeout: 5 s, not 30.
REDIS_URL=redis://127.0.0.1:$port npx jest --coverage=false --forceExit --testTimeout=5000 || true
