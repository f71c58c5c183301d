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
