// Calling the module's commands from Node.js with ioredis, reading the five-integer reply
// into a typed result.
//
//     npm ci --prefix examples/node
//     node examples/node/rate-limit.js          # REDIS_URL defaults to redis://127.0.0.1:6379
"use strict";

const Redis = require("ioredis");

/**
 * What CL.THROTTLE, RL.WINDOW and RL.LOG answer: the same five integers.
 * @typedef {object} RateLimit
 * @property {boolean} limited        true: refused, and not counted
 * @property {number} limit           the most admitted at once
 * @property {number} remaining       how much more would be admitted right now
 * @property {number|null} retryAfter when a refused request may retry; null when admitted or never
 * @property {number} resetAfter      when the limiter is back to full capacity
 */

/** @returns {RateLimit} */
function fromReply([limited, limit, remaining, retryAfter, resetAfter]) {
  return {
    limited: limited === 1,
    limit,
    remaining,
    retryAfter: retryAfter < 0 ? null : retryAfter,
    resetAfter,
  };
}

/** GCRA: `count` per `period` seconds, bursts of `maxBurst + 1`. */
async function throttle(redis, key, maxBurst, count, period, quantity = 1) {
  return fromReply(await redis.call("CL.THROTTLE", key, maxBurst, count, period, quantity));
}

/** A window counter: `limit` per `seconds`, "FIXED", "SLIDING" or "BUCKETS n". */
async function window(redis, key, limit, seconds, quantity = 1, algorithm = "SLIDING") {
  return fromReply(
    await redis.call("RL.WINDOW", key, limit, seconds, quantity, ...algorithm.split(" ")),
  );
}

/** An exact sliding log: at most `limit` in any `seconds`. */
async function log(redis, key, limit, seconds, quantity = 1) {
  return fromReply(await redis.call("RL.LOG", key, limit, seconds, quantity));
}

function describe(result, withTimes = true) {
  if (result.limited) {
    return withTimes ? `limited: retry in ${result.retryAfter} s` : "limited";
  }
  const text = `allowed: ${result.remaining} of ${result.limit} left`;
  return withTimes ? `${text}, full again in ${result.resetAfter} s` : text;
}

async function main() {
  const redis = new Redis(process.env.REDIS_URL || "redis://127.0.0.1:6379");
  const user = `example:${process.pid}`; // a fresh limiter on every run
  try {
    console.log("CL.THROTTLE: bursts of 2, then 1 per minute");
    for (let i = 0; i < 3; i++) {
      console.log("  " + describe(await throttle(redis, `${user}:throttle`, 1, 1, 60)));
    }
    console.log("RL.LOG: exactly 2 per minute");
    for (let i = 0; i < 3; i++) {
      console.log("  " + describe(await log(redis, `${user}:log`, 2, 60)));
    }
    // A window's times depend on where its boundaries fall, so they are left out here.
    console.log("RL.WINDOW: 2 per minute, sliding");
    for (let i = 0; i < 3; i++) {
      console.log("  " + describe(await window(redis, `${user}:window`, 2, 60), false));
    }
  } finally {
    redis.disconnect();
  }
}

module.exports = { fromReply, throttle, window, log };

if (require.main === module) {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
