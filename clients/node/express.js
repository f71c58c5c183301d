// An express-rate-limit Store on the redis-ratelimit module: each request is decided by one
// call, and a refused request counts nothing.
//
//     const { rateLimit } = require("express-rate-limit");
//     const { RateLimitModuleStore } = require("redis-ratelimit-module/express");
//     app.use(rateLimit({ windowMs: 60_000, limit: 100,
//                         store: new RateLimitModuleStore({ client: redis }) }));
"use strict";

const { commandSender } = require("./index");

class RateLimitModuleStore {
  /**
   * @param {object} options
   * @param {object} options.client  an ioredis or node-redis client
   * @param {"FIXED"|"SLIDING"|"LOG"} [options.algorithm]  RL.WINDOW FIXED (as
   *   express-rate-limit's own stores count), RL.WINDOW SLIDING, or RL.LOG (exact)
   * @param {string} [options.prefix]  prepended to every key
   */
  constructor({ client, algorithm = "FIXED", prefix = "rl:" }) {
    this.send = commandSender(client);
    this.algorithm = algorithm;
    this.prefix = prefix;
    this.localKeys = false;
    // Refused requests express-rate-limit may still decrement, per key: when each one's
    // window ends (after which it no longer decrements it).
    this.uncounted = new Map();
  }

  /** Called by express-rate-limit with its options: the window, the limit, and whether it
   * decrements failed requests, a refused one (429) among them. */
  init(options) {
    this.windowMs = options.windowMs;
    this.limit = options.limit;
    this.decrementsRefused = Boolean(options.skipFailedRequests);
  }

  limitFor() {
    if (typeof this.limit !== "number") {
      throw new TypeError("RateLimitModuleStore needs a number for `limit`: the module decides with it");
    }
    return this.limit;
  }

  command(key, quantity, extra = [], readOnly = false) {
    const suffix = readOnly ? "_RO" : "";
    if (this.algorithm === "LOG") {
      return ["RL.LOG" + suffix, this.prefix + key, this.limitFor(), this.windowMs, quantity, "MS", ...extra];
    }
    return ["RL.WINDOW" + suffix, this.prefix + key, this.limitFor(), this.windowMs, quantity,
      this.algorithm, "MS", ...extra];
  }

  // totalHits as express-rate-limit reads it: what was counted, and one more than the limit
  // for a refused request (which the module did not count).
  info(reply) {
    const [limited, limit, remaining, , resetAfter] = reply.map(Number);
    return {
      totalHits: limited === 1 ? limit + 1 : limit - remaining,
      resetTime: new Date(Date.now() + resetAfter),
    };
  }

  async increment(key) {
    if (this.limitFor() === 0) {
      // express-rate-limit's `limit: 0` refuses everything; the module has no such limit.
      return { totalHits: 1, resetTime: new Date(Date.now() + this.windowMs) };
    }
    const reply = (await this.send(this.command(key, 1))).map(Number);
    const info = this.info(reply);
    if (reply[0] === 1 && this.decrementsRefused) {
      // express-rate-limit will decrement this refusal, which the module never counted: the
      // decrement must give nothing back (it would return an admitted request).
      // It is decremented before its window ends (resetTime) or never; a second's grace
      // keeps the two clocks' reading of "ends" from returning an admitted request.
      const pending = this.pending(key);
      pending.push(info.resetTime.getTime() + 1_000);
      this.uncounted.set(key, pending);
      if (this.uncounted.size > 10_000) this.sweep();
    }
    return info;
  }

  async get(key) {
    if (this.limitFor() === 0) return undefined;
    const reply = (await this.send(this.command(key, 0, [], true))).map(Number);
    return { totalHits: reply[1] - reply[2], resetTime: new Date(Date.now() + reply[4]) };
  }

  async decrement(key) {
    const pending = this.pending(key);
    if (pending.length > 0) {
      pending.shift();
      if (pending.length === 0) this.uncounted.delete(key);
      return;
    }
    if (this.limitFor() === 0) return;
    await this.send(this.command(key, 1, ["REFUND"]));
  }

  async resetKey(key) {
    this.uncounted.delete(key);
    await this.send(["DEL", this.prefix + key]);
  }

  /** Forgets the refusals whose window ended, for every key. */
  sweep() {
    for (const key of [...this.uncounted.keys()]) this.pending(key);
  }

  /** The refusals of `key` that may still be decremented, the ones whose window ended gone. */
  pending(key) {
    const now = Date.now();
    const pending = (this.uncounted.get(key) || []).filter((until) => until > now);
    if (pending.length === 0) this.uncounted.delete(key);
    return pending;
  }
}

module.exports = { RateLimitModuleStore };
