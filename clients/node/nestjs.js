// A @nestjs/throttler storage on the redis-ratelimit module, counting as the throttler's own
// storage does: each hit leaves `ttl` after it (a log: RL.LOG), a refused hit counts
// nothing, `blockDuration` refuses every hit until it ends (BLOCK) and the hits start again
// from none when it does, and the reset the guard sends runs to the end of a window that
// starts at a key's first hit. One RL.ALL call a request, a block's start included.
//
//     ThrottlerModule.forRoot({ throttlers: [{ ttl: 60_000, limit: 10 }],
//                               storage: new RateLimitModuleThrottlerStorage(redis) })
"use strict";

const { commandSender } = require("./index");
const { Circuit, ServerUnavailable, guardedSender } = require("./resilience");

// The first-hit window the reset is read from counts every hit and never refuses.
const UNBOUNDED = 2 ** 50;

class RateLimitModuleThrottlerStorage {
  /**
   * @param {object} client  an ioredis or node-redis client
   * @param {object} [options]
   * @param {"LOG"|"SLIDING"|"FIXED"} [options.algorithm]  what counts the hits: RL.LOG (the
   *   default, as the throttler's own storage), RL.WINDOW SLIDING or FIXED
   * @param {string} [options.prefix]  prepended to every key
   * @param {number} [options.timeout]  ms a call waits at most (1000)
   * @param {"throw"|"allow"|"deny"} [options.onError]  when the server fails: "throw" (the
   *   default: the error reaches Nest, a 500), "allow" admits, "deny" answers 503 (with
   *   Retry-After under RateLimitModuleThrottlerGuard)
   * @param {number} [options.cooldown]  ms after a failure without asking the server (1000)
   * @param {object} [options.metrics]  a PrometheusMetrics (./metrics): decisions under the
   *   throttler's name, and server calls
   * @param {boolean} [options.shadow]  a refused request goes through, counted as "shadow"
   *   and logged
   */
  constructor(
    client,
    {
      algorithm = "LOG",
      prefix = "nest:",
      timeout = 1000,
      onError = "throw",
      cooldown = 1000,
      metrics = null,
      shadow = false,
      logger = console,
    } = {},
  ) {
    this.circuit = new Circuit({ onError, cooldown, logger });
    Object.assign(this, { metrics, shadow, logger });
    this.send = guardedSender(client, commandSender(client), this.circuit, timeout);
    this.algorithm = algorithm;
    this.prefix = prefix;
  }

  /** The words of the limiter that counts the hits, in RL.ALL and alone. */
  hitsLimiter(limit, ttl) {
    return this.algorithm === "LOG" ? ["LOG", limit, ttl] : ["WINDOW", limit, ttl, this.algorithm];
  }

  async increment(key, ttl, limit, blockDuration, throttlerName) {
    // One hash slot for both keys, on a Cluster.
    const tag = `{${this.prefix}${throttlerName}:${key}}`;
    const block = blockDuration > 0 ? ["BLOCK", blockDuration] : [];
    const args = [
      "RL.ALL",
      2,
      `${tag}:hits`,
      `${tag}:window`,
      ...this.hitsLimiter(limit, ttl),
      "WINDOW",
      UNBOUNDED,
      ttl,
      "ANCHORED",
      1,
      "MS",
      ...block,
      "DETAILS",
    ];
    let reply;
    const started = performance.now();
    try {
      reply = await this.send(args);
      this.metrics?.serverCall((performance.now() - started) / 1000);
    } catch (error) {
      if (!(error instanceof ServerUnavailable) || this.circuit.onError === "throw") throw error;
      this.metrics?.decision(throttlerName, this.circuit.onError === "allow" ? "failed_open" : "failed_closed");
      if (this.circuit.onError === "allow") {
        return { totalHits: 0, timeToExpire: Math.ceil(ttl / 1000), isBlocked: false, timeToBlockExpire: 0 };
      }
      throw unavailable(error);
    }
    const [limited, hits, window] = [Number(reply[0]), reply[5].map(Number), reply[6].map(Number)];
    const seconds = (ms) => Math.ceil(ms / 1000);
    if (limited === 0) {
      this.metrics?.decision(throttlerName, "allowed");
      return { totalHits: limit - hits[2], timeToExpire: seconds(window[4]), isBlocked: false, timeToBlockExpire: 0 };
    }
    if (this.shadow) {
      // Decided and counted as usual (a block included), but let through.
      this.metrics?.decision(throttlerName, "shadow");
      this.logger.warn?.(`rate limiter: shadow: ${throttlerName} would refuse ${key}`);
      return { totalHits: limit, timeToExpire: seconds(window[4]), isBlocked: false, timeToBlockExpire: 0 };
    }
    this.metrics?.decision(throttlerName, "refused");
    // A refusal that starts a block starts it from none (the module drops the hits), as the
    // throttler's storage starts the hits again when the block ends: one call.
    const retryAfter = Math.max(hits[3], 0);
    return {
      totalHits: limit + 1,
      timeToExpire: seconds(window[4]),
      isBlocked: true,
      timeToBlockExpire: seconds(retryAfter),
    };
  }
}

/** Nest's 503, with when to retry for RateLimitModuleThrottlerGuard's Retry-After. */
function unavailable(error) {
  const { ServiceUnavailableException } = require("@nestjs/common");
  return Object.assign(new ServiceUnavailableException("the rate limiter's server failed", { cause: error }), {
    retryAfter: Math.max(1, Math.ceil(error.retryAfter)),
  });
}

/**
 * ThrottlerGuard, adding `Retry-After` to the 503 the storage answers with `onError: "deny"`
 * (a storage cannot reach the response). Loaded from @nestjs/throttler when first used.
 */
function guardClass() {
  const { ThrottlerGuard } = require("@nestjs/throttler");
  class RateLimitModuleThrottlerGuard extends ThrottlerGuard {
    async handleRequest(requestProps) {
      try {
        return await super.handleRequest(requestProps);
      } catch (error) {
        if (
          error &&
          error.retryAfter !== undefined &&
          typeof error.getStatus === "function" &&
          error.getStatus() === 503
        ) {
          const { res } = this.getRequestResponse(requestProps.context);
          res.header("Retry-After", String(error.retryAfter));
        }
        throw error;
      }
    }
  }
  return RateLimitModuleThrottlerGuard;
}

let guard;
module.exports = {
  RateLimitModuleThrottlerStorage,
  get RateLimitModuleThrottlerGuard() {
    guard ??= guardClass();
    return guard;
  },
};
