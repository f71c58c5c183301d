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
  }

  /** Called by express-rate-limit with its options: the window, and the limit. */
  init(options) {
    this.windowMs = options.windowMs;
    this.limit = options.limit;
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
    return this.info(await this.send(this.command(key, 1)));
  }

  async get(key) {
    const reply = (await this.send(this.command(key, 0, [], true))).map(Number);
    return { totalHits: reply[1] - reply[2], resetTime: new Date(Date.now() + reply[4]) };
  }

  async decrement(key) {
    await this.send(this.command(key, 1, ["REFUND"]));
  }

  async resetKey(key) {
    await this.send(["DEL", this.prefix + key]);
  }
}

module.exports = { RateLimitModuleStore };
