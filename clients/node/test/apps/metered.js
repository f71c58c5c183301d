// The adapters with metrics on /metrics, for tests/clients.rs' scrape test: APP=express
// serves /metered (express-rate-limit, 2 a minute) and /shadowed (1 a minute, shadow mode);
// APP=nestjs serves / (the throttler, 2 a minute) and /metrics. PORT and REDIS_URL.
"use strict";

require("reflect-metadata");
const Redis = require("ioredis");
const { register } = require("prom-client");
const { PrometheusMetrics } = require("../../metrics");

const redis = new Redis(process.env.REDIS_URL);
const metrics = new PrometheusMetrics();
const port = Number(process.env.PORT);
const quiet = { error() {}, warn() {} };

async function expressApp() {
  const express = require("express");
  const { rateLimit } = require("express-rate-limit");
  const { RateLimitModuleStore } = require("../../express");
  const app = express();
  for (const [path, limit, shadow] of [
    ["metered", 2, false],
    ["shadowed", 1, true],
  ]) {
    app.use(
      `/${path}`,
      rateLimit({
        windowMs: 60_000,
        limit,
        store: new RateLimitModuleStore({ client: redis, prefix: `express:${path}:`, metrics, shadow, logger: quiet }),
      }),
    );
    app.get(`/${path}`, (req, res) => res.send("hello"));
  }
  app.get("/metrics", async (req, res) => res.type(register.contentType).send(await register.metrics()));
  app.listen(port, "127.0.0.1");
}

async function nestApp() {
  const { NestFactory } = require("@nestjs/core");
  const { RateLimitModuleThrottlerStorage } = require("../../nestjs");
  const { helloModule } = require("./nest");
  const AppModule = helloModule({
    throttlers: [{ ttl: 60_000, limit: 2 }],
    storage: new RateLimitModuleThrottlerStorage(redis, { metrics, logger: quiet }),
  });
  const app = await NestFactory.create(AppModule, { logger: false });
  // The metrics on the same server, ahead of Nest's routes.
  app.use("/metrics", async (req, res) => {
    res.setHeader("Content-Type", register.contentType);
    res.end(await register.metrics());
  });
  await app.listen(port, "127.0.0.1");
}

(process.env.APP === "nestjs" ? nestApp : expressApp)();
