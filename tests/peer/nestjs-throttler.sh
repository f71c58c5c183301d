#!/bin/sh
# @nestjs/throttler's own e2e tests (test/, jest) run against this package's storage: the
# checkout's default storage (src/throttler.providers.ts) becomes the package's
# RateLimitModuleThrottlerStorage, each module instance on a key prefix of its own, on a live
# server with the module. Nothing else changes. With ORIGINAL=1 it runs them unchanged, with
# the throttler's own in-memory storage, for comparison.
#
#   tests/peer/nestjs-throttler.sh <nestjs/throttler checkout>
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
# Its test dependencies, without the release and lint tools.
python3 - <<'PY'
import json
package = json.load(open("package.json"))
skip = ("changesets", "commitlint", "semantic", "conventional", "cz-", "husky", "lint-staged",
        "pinst", "eslint", "nodemon", "@nestjs/cli", "schematics", "prettier")
package["devDependencies"] = {name: version for name, version in package["devDependencies"].items()
                              if not any(word in name for word in skip)}
package["scripts"] = {}
json.dump(package, open("package.json", "w"), indent=1)
PY
rm -f pnpm-lock.yaml
npm install --no-audit --no-fund --ignore-scripts --legacy-peer-deps >/dev/null
if [ "${ORIGINAL:-0}" != 1 ]; then
    python3 - "$root" <<'PY'
import sys
root = sys.argv[1]
path = "src/throttler.providers.ts"
source = open(path).read()
source = source.replace("export const ThrottlerStorageProvider = {", f"""declare const require: any;
const {{ RateLimitModuleThrottlerStorage }} = require('{root}/clients/node/nestjs.js');
const Redis = require('{root}/clients/node/node_modules/ioredis');
const shared = new Redis(process.env.REDIS_URL);
let instances = 0;

export const ThrottlerStorageProvider = {{""", 1)
source = source.replace("      : new ThrottlerStorageService();", """      : (new RateLimitModuleThrottlerStorage(shared, {
          prefix: `nest:${process.pid}:${Date.now()}:${instances++}:`,
        }) as unknown as ThrottlerStorageService);""", 1)
assert "RateLimitModuleThrottlerStorage(shared" in source
open(path, "w").write(source)
PY
fi
start_server
REDIS_URL=redis://127.0.0.1:$port npx jest --config ./test/jest-e2e.json --forceExit || true
