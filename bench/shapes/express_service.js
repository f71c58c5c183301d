// Shape (c) of bench/overload.py: an Express service, each request burning CPU_MS of CPU,
// protected as docs/clients.md shows with every option at its default:
//
//     app.use(loadShedding(new LoadShedder(redis, "load:svc")));
//
// or by the package's fixed limit (one GCRA key at the capacity), or by nothing.
//
//     node bench/shapes/express_service.js PORT REDIS_URL MODE CPU_MS [CAPACITY]
"use strict";

const path = require("node:path");
const modules = path.join(__dirname, "../../clients/node/node_modules");
const express = require(path.join(modules, "express"));
const Redis = require(path.join(modules, "ioredis"));
const { RateLimiter, throttle } = require("../../clients/node");
const { LoadShedder, loadShedding } = require("../../clients/node/load");

const [port, url, mode, cpuMs, capacity] = process.argv.slice(2);
const redis = new Redis(url);
const app = express();
const shedder = mode === "shed" ? new LoadShedder(redis, `load:${port}`, { logger: { warn() {}, info() {} } }) : null;
if (shedder) app.use(loadShedding(shedder));
if (mode === "fixed") {
  const limiter = new RateLimiter(redis);
  const rate = Math.max(1, Math.round(Number(capacity)));
  const whole = [throttle("bench:capacity", Math.max(1, Math.floor(rate / 10)), rate, 1)];
  app.use(async (req, res, next) => {
    const result = await limiter.check(whole);
    if (!result.allowed) return res.status(429).send("Too Many Requests\n");
    next();
  });
}
app.get("/", (req, res) => {
  const until = process.cpuUsage();
  const spend = Number(cpuMs) * 1000;
  for (;;) {
    const used = process.cpuUsage(until);
    if (used.user + used.system >= spend) break;
  }
  res.send("ok\n");
});
app.get("/stats", (req, res) => {
  const limit = shedder?.limit;
  res.send(
    JSON.stringify({
      changes: limit?.changes ?? 0,
      congestions: limit?.congestions ?? 0,
      limit: limit?.limit,
      congested: limit?.congested,
      noload: limit?.noload,
      waited: shedder?.waited(performance.now() / 1000),
    }),
  );
});
app.listen(Number(port), "127.0.0.1");
