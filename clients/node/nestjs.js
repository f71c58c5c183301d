// A @nestjs/throttler storage on the redis-ratelimit module: `increment(key, ttl, limit,
// blockDuration, throttlerName)` is one call, with BLOCK for the block duration; a refused
// request counts nothing.
//
//     ThrottlerModule.forRoot({ throttlers: [{ ttl: 60_000, limit: 10 }],
//                               storage: new RateLimitModuleThrottlerStorage(redis) })
"use strict";

const { commandSender } = require("./index");

class RateLimitModuleThrottlerStorage {
  /**
   * @param {object} client  an ioredis or node-redis client
   * @param {object} [options]
   * @param {"FIXED"|"SLIDING"|"LOG"} [options.algorithm]  RL.WINDOW FIXED (as the throttler's
   *   own storage counts), RL.WINDOW SLIDING, or RL.LOG (exact)
   * @param {string} [options.prefix]  prepended to every key
   */
  constructor(client, { algorithm = "FIXED", prefix = "nest:" } = {}) {
    this.send = commandSender(client);
    this.algorithm = algorithm;
    this.prefix = prefix;
  }

  async increment(key, ttl, limit, blockDuration, throttlerName) {
    const name = `${this.prefix}${throttlerName}:${key}`;
    const block = blockDuration > 0 ? ["BLOCK", blockDuration] : [];
    const args = this.algorithm === "LOG"
      ? ["RL.LOG", name, limit, ttl, 1, "MS", ...block]
      : ["RL.WINDOW", name, limit, ttl, 1, this.algorithm, "MS", ...block];
    const [limited, , remaining, retryAfter, resetAfter] = (await this.send(args)).map(Number);
    const seconds = (ms) => Math.ceil(ms / 1000);
    return {
      totalHits: limited === 1 ? limit + 1 : limit - remaining,
      timeToExpire: seconds(resetAfter),
      isBlocked: limited === 1,
      timeToBlockExpire: limited === 1 ? seconds(Math.max(retryAfter, 0)) : 0,
    };
  }
}

module.exports = { RateLimitModuleThrottlerStorage };
