// The client package at work (clients/node): each kind of limiter, three requests on fresh
// keys, against the server at REDIS_URL (default redis://127.0.0.1:6379).
//
//     npm ci --prefix examples/node
//     node examples/node/demo.js
"use strict";

const Redis = require("ioredis");
const { RateLimiter, throttle, window, log } = require("redis-ratelimit-module");

function describe(result, withTimes = true) {
  if (!result.allowed) {
    return withTimes ? `limited: retry in ${Math.ceil(result.retryAfter)} s` : "limited";
  }
  const text = `allowed: ${result.remaining} of ${result.limit} left`;
  return withTimes ? `${text}, full again in ${Math.ceil(result.resetAfter)} s` : text;
}

async function main() {
  const redis = new Redis(process.env.REDIS_URL || "redis://127.0.0.1:6379");
  const limiter = new RateLimiter(redis);
  const user = `example:${process.pid}`; // fresh limiters on every run
  try {
    console.log("CL.THROTTLE: bursts of 2, then 1 per minute");
    for (let i = 0; i < 3; i++) {
      console.log("  " + describe(await limiter.check([throttle(`${user}:throttle`, 1, 1, 60)])));
    }
    console.log("RL.LOG: exactly 2 per minute");
    for (let i = 0; i < 3; i++) {
      console.log("  " + describe(await limiter.check([log(`${user}:log`, 2, 60)])));
    }
    // A window's times depend on where its boundaries fall, so they are left out here.
    console.log("RL.WINDOW: 2 per minute, sliding");
    for (let i = 0; i < 3; i++) {
      console.log("  " + describe(await limiter.check([window(`${user}:window`, 2, 60)]), false));
    }
    console.log("RL.ALL: 2 per minute and 3 per hour, together");
    const limits = [log(`${user}:minute`, 2, 60), log(`${user}:hour`, 3, 3600)];
    for (let i = 0; i < 3; i++) {
      console.log("  " + describe(await limiter.check(limits)));
    }
    console.log("RL.ACQUIRE: 1 worker at a time");
    const first = await limiter.acquireLease(`${user}:workers`, 1, 30);
    const second = await limiter.acquireLease(`${user}:workers`, 1, 30);
    console.log(`  first: ${first.allowed ? "got a lease" : "refused"}`);
    console.log(`  second: ${second.allowed ? "got a lease" : "refused"}`);
    console.log(`  released: ${(await limiter.releaseLease(`${user}:workers`, first.id)) ? "True" : "False"}`);
  } finally {
    redis.disconnect();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
