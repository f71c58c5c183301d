// @nestjs/throttler with the module's storage, in a real NestJS app over real HTTP. The app
// is plain JavaScript: its decorators are applied by hand, as TypeScript would.
"use strict";

require("reflect-metadata");
const assert = require("node:assert/strict");
const { randomUUID } = require("node:crypto");
const { after, test } = require("node:test");
const { Controller, Get, Module } = require("@nestjs/common");
const { APP_GUARD, NestFactory } = require("@nestjs/core");
const { ThrottlerGuard, ThrottlerModule } = require("@nestjs/throttler");
const { RateLimitModuleThrottlerStorage } = require("../nestjs");
const { ioredis, burst, counted } = require("./helpers");

const redis = ioredis();
after(() => redis.disconnect());

function appModule(storage) {
  class HelloController {
    hello() {
      return "hello";
    }
  }
  Reflect.decorate([Get()], HelloController.prototype, "hello",
    Object.getOwnPropertyDescriptor(HelloController.prototype, "hello"));
  Reflect.decorate([Controller()], HelloController);
  class AppModule {}
  Reflect.decorate([Module({
    imports: [ThrottlerModule.forRoot({
      throttlers: [{ ttl: 60_000, limit: 5, blockDuration: 30_000 }],
      storage,
    })],
    controllers: [HelloController],
    providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
  })], AppModule);
  return AppModule;
}

test("the limit holds under concurrent requests, with a block, and refused ones cost nothing", async () => {
  const prefix = `nest:${randomUUID()}:`;
  const storage = new RateLimitModuleThrottlerStorage(redis, { prefix });
  const app = await NestFactory.create(appModule(storage), { logger: false });
  await app.listen(0, "127.0.0.1");
  const base = `http://127.0.0.1:${app.getHttpServer().address().port}`;
  try {
    const responses = await burst(`${base}/`, 20);
    assert.equal(counted(responses, 200), 5);
    assert.equal(counted(responses, 429), 15);
    const admitted = responses.find((one) => one.status === 200);
    assert.equal(admitted.headers.get("x-ratelimit-limit"), "5");
    const refused = responses.find((one) => one.status === 429);
    // The block (30 s) started with the first refusal: Retry-After says it.
    const retryAfter = Number(refused.headers.get("retry-after"));
    assert.ok(retryAfter > 25 && retryAfter <= 60, `${retryAfter}`);
    const keys = await redis.keys(`${prefix}*`);
    assert.equal(keys.length, 1);
    const counts = await redis.call("RL.WINDOW.COUNTS", keys[0], 60000, "FIXED", "MS");
    assert.equal(counts[2], 5);
  } finally {
    await app.close();
  }
});
