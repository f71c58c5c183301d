// A CPU-bound service behind Node's http server with `shedRequests` at its defaults: each request
// burns 4 ms of the event loop. REDIS_URL names the server, SERVICE the shedder's key,
// ACCEPT_PROBE=0 turns the accept queue's probe off. It tells its parent its port, and answers
// its limit's counters at /stats (as the top class, never shed).
"use strict";

const http = require("node:http");
const Redis = require("ioredis");
const { LoadShedder, shedRequests } = require("../../load");

const redis = new Redis(process.env.REDIS_URL);
redis.on("error", () => {});
const quiet = { error() {}, warn() {}, info() {} };
const shedder = new LoadShedder(redis, process.env.SERVICE, {
  logger: quiet,
  acceptProbe: process.env.ACCEPT_PROBE !== "0",
});
const server = http.createServer(
  shedRequests(shedder, (req, res) => {
    if (req.url === "/stats") {
      const { congestions, congested } = shedder.limit;
      res.end(JSON.stringify({ congestions, congested, probing: Boolean(shedder.probe && !shedder.probe.lost) }));
      return;
    }
    const end = performance.now() + 4;
    while (performance.now() < end);
    res.end("ok");
  }),
);
server.listen(0, "127.0.0.1", () => process.send({ port: server.address().port }));
