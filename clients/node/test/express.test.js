// express-rate-limit with the module's Store, in a real Express app over real HTTP.
"use strict";

const assert = require("node:assert/strict");
const { randomUUID } = require("node:crypto");
const { after, test } = require("node:test");
const express = require("express");
const Redis = require("ioredis");
const { rateLimit, MemoryStore } = require("express-rate-limit");
const { RateLimitModuleStore } = require("../express");
const { ioredis, burst, counted, listen } = require("./helpers");

const redis = ioredis();
after(() => redis.disconnect());

for (const algorithm of ["ANCHORED", "FIXED", "SLIDING", "LOG"]) {
  test(`${algorithm}: the limit holds under concurrent requests`, async () => {
    const prefix = `express:${randomUUID()}:`;
    const app = express();
    app.use(
      rateLimit({
        // An hour: a FIXED window on the clock rolls over within a test rarely enough.
        windowMs: 3_600_000,
        limit: 5,
        standardHeaders: "draft-8",
        legacyHeaders: false,
        store: new RateLimitModuleStore({ client: redis, algorithm, prefix }),
      }),
    );
    app.get("/", (req, res) => res.send("hello"));
    const { server, base } = await listen(app);
    try {
      const responses = await burst(`${base}/`, 20);
      assert.equal(counted(responses, 200), 5);
      assert.equal(counted(responses, 429), 15);
      const refused = responses.find((one) => one.status === 429);
      assert.match(refused.headers.get("ratelimit-policy"), /q=5; ?w=3600/);
      assert.match(refused.headers.get("ratelimit"), /r=0/);
      assert.ok(Number(refused.headers.get("retry-after")) > 0);
      const keys = await redis.keys(`${prefix}*`);
      assert.equal(keys.length, 1);
      if (algorithm === "ANCHORED") {
        // Every hit counted, as express-rate-limit's own stores count them.
        const counts = await redis.call("RL.WINDOW.COUNTS", keys[0], 3600000, "ANCHORED", "MS");
        assert.equal(counts[2], 20);
        return;
      }
      // The module counted the five admitted, not the fifteen refused.
      const peek =
        algorithm === "LOG"
          ? await redis.call("RL.LOG_RO", keys[0], 5, 3600000, 0, "MS")
          : await redis.call("RL.WINDOW_RO", keys[0], 5, 3600000, 0, algorithm, "MS");
      assert.equal(peek[2], 0);
      const counts =
        algorithm === "LOG"
          ? await redis.call("RL.LOG.COUNTS", keys[0], 3600000, "MS")
          : await redis.call("RL.WINDOW.COUNTS", keys[0], 3600000, algorithm, "MS");
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
    const store = new RateLimitModuleStore({ client: redis, algorithm, prefix });
    const app = express();
    app.use(
      rateLimit({
        windowMs: 3_600_000,
        limit: 2,
        skipFailedRequests: true,
        store,
      }),
    );
    app.get("/", (req, res) => res.send("hello"));
    app.get("/fails", (req, res) => res.status(500).send("failed"));
    const { server, base, settled } = await listen(app, store);
    try {
      const statuses = [];
      for (let i = 0; i < 8; i++) {
        const response = await fetch(`${base}/`);
        await response.text();
        statuses.push(response.status);
        // express-rate-limit's decrement (on the response's end) goes first.
        await settled();
      }
      // As express-rate-limit's MemoryStore answers: two admitted, then refused.
      assert.deepEqual(statuses, [200, 200, 429, 429, 429, 429, 429, 429]);
      // The module counts the two admitted, nothing more.
      const [key] = await redis.keys(`${prefix}*`);
      const counts =
        algorithm === "LOG"
          ? await redis.call("RL.LOG.COUNTS", key, 3600000, "MS")
          : await redis.call("RL.WINDOW.COUNTS", key, 3600000, algorithm, "MS");
      assert.equal(algorithm === "LOG" ? counts[0] : counts[2], 2);
    } finally {
      server.close();
    }
  });

  test(`${algorithm}: a failed request is given back`, async () => {
    const prefix = `express:${randomUUID()}:`;
    const store = new RateLimitModuleStore({ client: redis, algorithm, prefix });
    const app = express();
    app.use(
      rateLimit({
        // An hour: a FIXED window on the clock rolls over within the test once in 18,000
        // runs, not once in 300 as with a minute.
        windowMs: 3_600_000,
        limit: 2,
        skipFailedRequests: true,
        store,
      }),
    );
    app.get("/fails", (req, res) => res.status(500).send("failed"));
    app.get("/", (req, res) => res.send("hello"));
    const { server, base, settled } = await listen(app, store);
    try {
      const statuses = [];
      for (const path of ["/fails", "/fails", "/", "/", "/"]) {
        const response = await fetch(`${base}${path}`);
        await response.text();
        statuses.push(response.status);
        await settled();
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
  app.use(
    rateLimit({
      windowMs: 60_000,
      limit: 0,
      store: new RateLimitModuleStore({ client: redis, prefix }),
    }),
  );
  app.get("/", (req, res) => res.send("hello"));
  const { server, base } = await listen(app);
  try {
    const responses = await burst(`${base}/`, 3);
    assert.equal(counted(responses, 429), 3);
  } finally {
    server.close();
  }
});

/** The statuses and rate-limit fields of `paths` requested one after another, each after the
 * last has settled (its decrement done, if any). */
async function sequence({ base, settled }, paths) {
  const seen = [];
  for (const path of paths) {
    const response = await fetch(`${base}${path}`);
    await response.text();
    const fields = {};
    for (const name of ["ratelimit", "ratelimit-policy", "x-ratelimit-limit", "x-ratelimit-remaining", "retry-after"]) {
      fields[name] = response.headers.get(name);
    }
    seen.push({ path, status: response.status, fields });
    await settled();
  }
  return seen;
}

// Side by side with express-rate-limit's own MemoryStore: the same requests get the same
// statuses and fields, with the default ANCHORED store, for each way of counting.
const scenarios = [
  { limit: 3, paths: ["/", "/", "/", "/", "/", "/"] },
  { limit: 2, skipFailedRequests: true, paths: ["/", "/fails", "/", "/", "/", "/fails", "/"] },
  { limit: 2, skipSuccessfulRequests: true, paths: ["/", "/", "/fails", "/fails", "/", "/fails"] },
  { limit: (req) => (req.query.vip ? 4 : 1), paths: ["/", "/", "/?vip=1", "/?vip=1", "/?vip=1", "/?vip=1"] },
  { limit: 0, paths: ["/", "/"] },
];
for (const [index, { paths, ...options }] of scenarios.entries()) {
  test(`scenario ${index}: as express-rate-limit's MemoryStore answers`, async () => {
    const run = async (store) => {
      const app = express();
      app.use(rateLimit({ windowMs: 60_000, standardHeaders: "draft-8", legacyHeaders: true, ...options, store }));
      app.get("/", (req, res) => res.send("hello"));
      app.get("/fails", (req, res) => res.status(500).send("failed"));
      const listening = await listen(app, store);
      try {
        return await sequence(listening, paths);
      } finally {
        listening.server.close();
      }
    };
    const theirs = await run(new MemoryStore());
    const ours = await run(new RateLimitModuleStore({ client: redis, prefix: `express:${randomUUID()}:` }));
    assert.deepEqual(ours, theirs);
  });
}

test("get() and resetAll() answer as MemoryStore does", async () => {
  const prefix = `express:${randomUUID()}:`;
  const other = `express:${randomUUID()}:`;
  const options = { windowMs: 60_000, limit: 5 };
  const memory = new MemoryStore();
  const store = new RateLimitModuleStore({ client: redis, prefix });
  const neighbour = new RateLimitModuleStore({ client: redis, prefix: other });
  for (const one of [memory, store, neighbour]) one.init(options);
  try {
    for (const one of [memory, store]) {
      assert.equal(await one.get("a"), undefined, "never hit");
      const { resetTime } = await one.increment("a");
      await one.decrement("a");
      // Decremented to zero: the window runs on, with its reset time.
      const zero = await one.get("a");
      assert.equal(zero.totalHits, 0);
      assert.ok(Math.abs(zero.resetTime - resetTime) < 1000, `${zero.resetTime} ${resetTime}`);
      // The next hit counts in the same window.
      const next = await one.increment("a");
      assert.deepEqual(next.totalHits, 1);
      assert.ok(Math.abs(next.resetTime - resetTime) < 1000);
      await one.increment("b");
      await one.resetAll();
      assert.deepEqual([await one.get("a"), await one.get("b")], [undefined, undefined]);
    }
    // Only this store's keys: another prefix keeps its own.
    await neighbour.increment("a");
    await store.increment("a");
    await store.resetAll();
    assert.equal((await neighbour.get("a")).totalHits, 1);
  } finally {
    memory.shutdown();
    await neighbour.resetAll();
  }
});

test("the window starts at the first hit, as the reset field says", async () => {
  const prefix = `express:${randomUUID()}:`;
  const app = express();
  app.use(
    rateLimit({
      windowMs: 3_000,
      limit: 2,
      standardHeaders: "draft-7",
      store: new RateLimitModuleStore({ client: redis, prefix }),
    }),
  );
  app.get("/", (req, res) => res.send("hello"));
  const listening = await listen(app);
  const { server } = listening;
  try {
    const [first] = await sequence(listening, ["/"]);
    assert.match(first.fields.ratelimit, /reset=3/);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const [, third] = await sequence(listening, ["/", "/"]);
    assert.equal(third.status, 429);
    assert.match(third.fields.ratelimit, /reset=[12]\b/);
  } finally {
    server.close();
  }
});

// A server that is gone: ioredis would queue the call while it reconnects; the store does
// not wait on that, and onError decides.
for (const [onError, passOnStoreError, expected] of [
  ["allow", false, 200],
  ["deny", false, 503],
  ["throw", false, 500],
  ["throw", true, 200],
]) {
  test(`onError ${onError}, passOnStoreError ${passOnStoreError}: ${expected} at once when the server is gone`, async () => {
    const gone = new Redis({ port: 1, lazyConnect: false, retryStrategy: () => 1000, maxRetriesPerRequest: null });
    gone.on("error", () => {});
    const app = express();
    app.use(
      rateLimit({
        windowMs: 60_000,
        limit: 5,
        passOnStoreError,
        store: new RateLimitModuleStore({ client: gone, onError, timeout: 300, logger: { error() {} } }),
      }),
    );
    app.get("/", (req, res) => res.send("hello"));
    const listening = await listen(app);
    const { server } = listening;
    try {
      const started = Date.now();
      const responses = await sequence(listening, ["/", "/", "/"]);
      // Each within the store's timeout (300 ms), with a margin for a busy machine.
      assert.ok(Date.now() - started < 3 * 300 + 5_000, `${Date.now() - started} ms`);
      assert.deepEqual(
        responses.map((one) => one.status),
        [expected, expected, expected],
      );
      if (expected === 503) assert.equal(responses[0].fields["retry-after"], "1");
    } finally {
      server.close();
      gone.disconnect();
    }
  });
}
