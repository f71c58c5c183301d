// @nestjs/throttler with the module's storage, in a real NestJS app over real HTTP. The app
// is plain JavaScript: its decorators are applied by hand, as TypeScript would.
"use strict";

require("reflect-metadata");
const assert = require("node:assert/strict");
const { randomUUID } = require("node:crypto");
const { after, test } = require("node:test");
const { NestFactory } = require("@nestjs/core");
const { ThrottlerGuard, ThrottlerStorageService } = require("@nestjs/throttler");
const Redis = require("ioredis");
const { RateLimitModuleThrottlerStorage, RateLimitModuleThrottlerGuard } = require("../nestjs");
const { helloModule } = require("./apps/nest");
const { ioredis, burst, counted } = require("./helpers");

const redis = ioredis();
after(() => redis.disconnect());

function appModule(storage, throttlers = [{ ttl: 60_000, limit: 5, blockDuration: 30_000 }], guard = ThrottlerGuard) {
  return helloModule({ storage, throttlers, guard });
}

test("the limit holds under concurrent requests, with a block, and refused ones cost nothing", async () => {
  const prefix = `nest:${randomUUID()}:`;
  const storage = new RateLimitModuleThrottlerStorage(redis, { prefix });
  const app = await NestFactory.create(appModule(storage), { logger: false });
  await app.listen(0, "127.0.0.1");
  const base = `http://127.0.0.1:${app.getHttpServer().address().port}`;
  // Every command the server runs on this test's keys.
  const monitor = await redis.monitor();
  const commands = [];
  monitor.on("monitor", (_, args) => {
    if (args.some((arg) => String(arg).includes(prefix))) commands.push(args[0].toUpperCase());
  });
  try {
    const responses = await burst(`${base}/`, 20);
    assert.equal(counted(responses, 200), 5);
    assert.equal(counted(responses, 429), 15);
    // One call a request, the one that started the block included. The feed is in order:
    // once it shows a last command, it showed every one before.
    await redis.exists(`${prefix}end`);
    for (let waited = 0; !commands.includes("EXISTS") && waited < 5000; waited += 10) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.deepEqual(commands, [...Array(20).fill("RL.ALL"), "EXISTS"]);
    const admitted = responses.find((one) => one.status === 200);
    assert.equal(admitted.headers.get("x-ratelimit-limit"), "5");
    const refused = responses.find((one) => one.status === 429);
    // The block (30 s) started with the first refusal: Retry-After says it.
    const retryAfter = Number(refused.headers.get("retry-after"));
    assert.ok(retryAfter > 25 && retryAfter <= 60, `${retryAfter}`);
    // The hits and the first-hit window, in one hash slot.
    const keys = (await redis.keys(`{${prefix}*`)).sort();
    assert.equal(keys.length, 2);
    assert.match(keys[0], /^\{.*\}:hits$/);
  } finally {
    monitor.disconnect();
    await app.close();
  }
});

/** Starts the app on `storage`, runs `steps` (a number: requests one after another; a
 * string "wait N": N ms), and gives each response's status and fields. */
async function run(storage, throttlers, steps, guard = ThrottlerGuard) {
  const app = await NestFactory.create(appModule(storage, throttlers, guard), { logger: false });
  await app.listen(0, "127.0.0.1");
  const base = `http://127.0.0.1:${app.getHttpServer().address().port}`;
  const seen = [];
  try {
    for (const step of steps) {
      if (typeof step === "string") {
        await new Promise((resolve) => setTimeout(resolve, Number(step.split(" ")[1])));
        continue;
      }
      for (let i = 0; i < step; i++) {
        const response = await fetch(`${base}/`);
        await response.text();
        seen.push({
          status: response.status,
          remaining: response.headers.get("x-ratelimit-remaining"),
          reset: response.headers.get("x-ratelimit-reset"),
          retryAfter: response.headers.get("retry-after"),
        });
      }
    }
  } finally {
    await app.close();
  }
  return seen;
}

// Side by side with the throttler's own storage: the same requests get the same statuses
// and fields, a block included (the hits start again when it ends).
const scenarios = [
  { throttlers: [{ ttl: 3_000, limit: 2 }], steps: [3, "wait 1200", 1] },
  { throttlers: [{ ttl: 4_000, limit: 2, blockDuration: 1_000 }], steps: [3, "wait 1300", 3] },
  {
    throttlers: [
      { ttl: 60_000, limit: 3 },
      { name: "burst", ttl: 2_000, limit: 1 },
    ],
    steps: [2, "wait 2100", 2],
  },
];
for (const [index, { throttlers, steps }] of scenarios.entries()) {
  test(`scenario ${index}: as the throttler's own storage answers`, async () => {
    const theirs = await run(new ThrottlerStorageService(), throttlers, steps);
    const ours = await run(
      new RateLimitModuleThrottlerStorage(redis, { prefix: `nest:${randomUUID()}:` }),
      throttlers,
      steps,
    );
    assert.deepEqual(ours, theirs);
  });
}

test("a server that is gone: deny answers 503 with Retry-After at once, allow lets through", async () => {
  const gone = new Redis({ port: 1, retryStrategy: () => 1000, maxRetriesPerRequest: null });
  gone.on("error", () => {});
  const quiet = { error() {} };
  try {
    const throttlers = [{ ttl: 60_000, limit: 5 }];
    const started = Date.now();
    const denied = await run(
      new RateLimitModuleThrottlerStorage(gone, { onError: "deny", logger: quiet }),
      throttlers,
      [2],
      RateLimitModuleThrottlerGuard,
    );
    assert.deepEqual(
      denied.map((one) => [one.status, one.retryAfter]),
      [
        [503, "1"],
        [503, "1"],
      ],
    );
    const allowed = await run(
      new RateLimitModuleThrottlerStorage(gone, { onError: "allow", logger: quiet }),
      throttlers,
      [2],
    );
    assert.deepEqual(
      allowed.map((one) => one.status),
      [200, 200],
    );
    // The first call of each storage waits its timeout (1 s), the rest decide by the open
    // circuit: bounded by two timeouts, with a margin for a busy machine.
    assert.ok(Date.now() - started < 2 * 1_000 + 5_000, `${Date.now() - started} ms`);
  } finally {
    gone.disconnect();
  }
});

test("shadow mode lets a refused request through, and counts it", async () => {
  const { Registry } = require("prom-client");
  const { PrometheusMetrics } = require("../metrics");
  const register = new Registry();
  const storage = new RateLimitModuleThrottlerStorage(redis, {
    prefix: `nest:${randomUUID()}:`,
    shadow: true,
    metrics: new PrometheusMetrics({ register }),
    logger: { warn() {} },
  });
  const seen = await run(storage, [{ ttl: 60_000, limit: 1 }], [3]);
  assert.deepEqual(
    seen.map((one) => one.status),
    [200, 200, 200],
  );
  const text = await register.metrics();
  assert.match(text, /ratelimit_decisions_total\{policy="default",outcome="allowed"\} 1/);
  assert.match(text, /ratelimit_decisions_total\{policy="default",outcome="shadow"\} 2/);
});
