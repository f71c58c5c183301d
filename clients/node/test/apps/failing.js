// The adapters in their frameworks for tests/clients.rs' failing-server test: APP=express
// serves /allow and /deny (express-rate-limit on the store with onError "allow" and
// "deny"), APP=nestjs serves / (the throttler on the storage with onError "deny", and its
// guard); each call bounded by 200 ms, with a cool-down of 500 ms. PORT and REDIS_URL.
"use strict";

require("reflect-metadata");
const Redis = require("ioredis");

const redis = new Redis(process.env.REDIS_URL, { maxRetriesPerRequest: null, retryStrategy: () => 100 });
redis.on("error", () => {});
const bounded = { timeout: 200, cooldown: 500, logger: { error() {} } };
const port = Number(process.env.PORT);

async function expressApp() {
  const express = require("express");
  const { rateLimit } = require("express-rate-limit");
  const { RateLimitModuleStore } = require("../../express");
  const app = express();
  for (const onError of ["allow", "deny"]) {
    app.use(
      `/${onError}`,
      rateLimit({
        windowMs: 60_000,
        limit: 1000,
        store: new RateLimitModuleStore({ client: redis, prefix: `${onError}:`, onError, ...bounded }),
      }),
    );
    app.get(`/${onError}`, (req, res) => res.send("hello"));
  }
  app.listen(port, "127.0.0.1");
}

async function nestApp() {
  const { NestFactory } = require("@nestjs/core");
  const { RateLimitModuleThrottlerStorage, RateLimitModuleThrottlerGuard } = require("../../nestjs");
  const { helloModule } = require("./nest");
  const AppModule = helloModule({
    throttlers: [{ ttl: 60_000, limit: 1000 }],
    storage: new RateLimitModuleThrottlerStorage(redis, { onError: "deny", ...bounded }),
    guard: RateLimitModuleThrottlerGuard,
  });
  const app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(port, "127.0.0.1");
}

(process.env.APP === "nestjs" ? nestApp : expressApp)();
