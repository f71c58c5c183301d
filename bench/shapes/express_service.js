// Shape (c) of bench/overload.py: an Express service, each request burning CPU_MS of CPU,
// protected as docs/clients.md shows with every option at its default:
//
//     http.createServer(shedRequests(new LoadShedder(redis, "load:svc"), app));
//
// or by the package's fixed limit (one GCRA key at the capacity), or by nothing, or by a peer
// (toobusy-js, overload-protection) as its README shows.
//
//     node bench/shapes/express_service.js PORT REDIS_URL MODE CPU_MS [CAPACITY]
"use strict";

const path = require("node:path");
const modules = path.join(__dirname, "../../clients/node/node_modules");
const express = require(path.join(modules, "express"));
const Redis = require(path.join(modules, "ioredis"));
const { RateLimiter, throttle } = require("../../clients/node");
const http = require("node:http");
const { LoadShedder, shedRequests } = require("../../clients/node/load");

const [port, url, mode, cpuMs, capacity] = process.argv.slice(2);
const redis = new Redis(url);
const app = express();
const shedder = mode === "shed" ? new LoadShedder(redis, `load:${port}`, { logger: { warn() {}, info() {} } }) : null;
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
// The peers, each with its documented defaults (bench/shapes/package.json pins them).
const peers = path.join(__dirname, "node_modules");
if (mode === "toobusy") {
  const toobusy = require(path.join(peers, "toobusy-js"));
  app.use((req, res, next) => (toobusy() ? res.status(503).send("Server too busy\n") : next()));
}
if (mode === "overload-protection") {
  app.use(require(path.join(peers, "overload-protection"))("express"));
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
      // Whether the accept queue's probe still runs (false once it stopped; null: none).
      probing: shedder?.probe ? !shedder.probe.lost : null,
    }),
  );
});
// Load shedding at the server's request event, before Express sees the request.
const listener = shedder ? shedRequests(shedder, app) : app;
const server = http.createServer(listener).listen(Number(port), "127.0.0.1");
