// express-rate-limit with the module's Store, in a real Express app over real HTTP.
"use strict";

const assert = require("node:assert/strict");
const { randomUUID } = require("node:crypto");
const { after, test } = require("node:test");
const express = require("express");
const { rateLimit } = require("express-rate-limit");
const { RateLimitModuleStore } = require("../express");
const { ioredis, burst, counted, listen } = require("./helpers");

const redis = ioredis();
after(() => redis.disconnect());

for (const algorithm of ["FIXED", "SLIDING", "LOG"]) {
  test(`${algorithm}: the limit holds under concurrent requests, refused ones cost nothing`, async () => {
    const prefix = `express:${randomUUID()}:`;
    const app = express();
    app.use(rateLimit({
      windowMs: 60_000,
      limit: 5,
      standardHeaders: "draft-8",
      legacyHeaders: false,
      store: new RateLimitModuleStore({ client: redis, algorithm, prefix }),
    }));
    app.get("/", (req, res) => res.send("hello"));
    const { server, base } = await listen(app);
    try {
      const responses = await burst(`${base}/`, 20);
      assert.equal(counted(responses, 200), 5);
      assert.equal(counted(responses, 429), 15);
      const refused = responses.find((one) => one.status === 429);
      assert.match(refused.headers.get("ratelimit-policy"), /q=5; ?w=60/);
      assert.match(refused.headers.get("ratelimit"), /r=0/);
      assert.ok(Number(refused.headers.get("retry-after")) > 0);
      // The module counted the five admitted, not the fifteen refused.
      const keys = await redis.keys(`${prefix}*`);
      assert.equal(keys.length, 1);
      const peek = algorithm === "LOG"
        ? await redis.call("RL.LOG_RO", keys[0], 5, 60000, 0, "MS")
        : await redis.call("RL.WINDOW_RO", keys[0], 5, 60000, 0, algorithm, "MS");
      assert.equal(peek[2], 0);
      const counts = algorithm === "LOG"
        ? await redis.call("RL.LOG.COUNTS", keys[0], 60000, "MS")
        : await redis.call("RL.WINDOW.COUNTS", keys[0], 60000, algorithm, "MS");
      assert.equal(algorithm === "LOG" ? counts[0] : counts[2], 5);
    } finally {
      server.close();
    }
  });
}

// express-rate-limit decrements a refused request with `skipFailedRequests` (a 429 is a
// failed request), as its own stores counted it: the store must give nothing back for it.
for (const algorithm of ["FIXED", "SLIDING", "LOG"]) {
  test(`${algorithm}: skipFailedRequests gives back nothing for a refused request`, async () => {
    const prefix = `express:${randomUUID()}:`;
    const app = express();
    app.use(rateLimit({
      windowMs: 60_000,
      limit: 2,
      skipFailedRequests: true,
      store: new RateLimitModuleStore({ client: redis, algorithm, prefix }),
    }));
    app.get("/", (req, res) => res.send("hello"));
    app.get("/fails", (req, res) => res.status(500).send("failed"));
    const { server, base } = await listen(app);
    try {
      const statuses = [];
      for (let i = 0; i < 8; i++) {
        const response = await fetch(`${base}/`);
        await response.text();
        statuses.push(response.status);
        // Let express-rate-limit's decrement (on the response's end) run first.
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      // As express-rate-limit's MemoryStore answers: two admitted, then refused.
      assert.deepEqual(statuses, [200, 200, 429, 429, 429, 429, 429, 429]);
      // The module counts the two admitted, nothing more.
      const [key] = await redis.keys(`${prefix}*`);
      const counts = algorithm === "LOG"
        ? await redis.call("RL.LOG.COUNTS", key, 60000, "MS")
        : await redis.call("RL.WINDOW.COUNTS", key, 60000, algorithm, "MS");
      assert.equal(algorithm === "LOG" ? counts[0] : counts[2], 2);
    } finally {
      server.close();
    }
  });

  test(`${algorithm}: a failed request is given back`, async () => {
    const prefix = `express:${randomUUID()}:`;
    const app = express();
    app.use(rateLimit({
      windowMs: 60_000,
      limit: 2,
      skipFailedRequests: true,
      store: new RateLimitModuleStore({ client: redis, algorithm, prefix }),
    }));
    app.get("/fails", (req, res) => res.status(500).send("failed"));
    app.get("/", (req, res) => res.send("hello"));
    const { server, base } = await listen(app);
    try {
      const statuses = [];
      for (const path of ["/fails", "/fails", "/", "/", "/"]) {
        const response = await fetch(`${base}${path}`);
        await response.text();
        statuses.push(response.status);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      // The two failures are given back: two successes fit, the third is refused.
      assert.deepEqual(statuses, [500, 500, 200, 200, 429]);
    } finally {
      server.close();
    }
  });
}

test("limit 0 refuses everything, as express-rate-limit means it", async () => {
  const prefix = `express:${randomUUID()}:`;
  const app = express();
  app.use(rateLimit({
    windowMs: 60_000,
    limit: 0,
    store: new RateLimitModuleStore({ client: redis, prefix }),
  }));
  app.get("/", (req, res) => res.send("hello"));
  const { server, base } = await listen(app);
  try {
    const responses = await burst(`${base}/`, 3);
    assert.equal(counted(responses, 429), 3);
  } finally {
    server.close();
  }
});
