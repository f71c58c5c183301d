// An express-rate-limit Store on the redis-ratelimit module.
//
//     const { rateLimit } = require("express-rate-limit");
//     const { RateLimitModuleStore } = require("redis-ratelimit-module/express");
//     app.use(rateLimit({ windowMs: 60_000, limit: 100,
//                         store: new RateLimitModuleStore({ client: redis }) }));
//
// By default (algorithm "ANCHORED") it counts as express-rate-limit's own MemoryStore and
// rate-limit-redis do: a window from each client's first hit, every hit counted, refused ones
// too, express-rate-limit deciding with its limit; one RL.WINDOW ... ANCHORED call a
// request. "FIXED", "SLIDING" and "LOG" let the module decide instead (windows on the clock,
// sliding, or an exact log; a refused request counts nothing).
"use strict";

const { commandSender, primarySenders } = require("./index");
const { Circuit, ServerUnavailable, guardedSender } = require("./resilience");

// The count of an ANCHORED window never reaches it: every hit is counted, as
// express-rate-limit's stores count (2^50, exact as a JavaScript number).
const UNBOUNDED = 2 ** 50;

class RateLimitModuleStore {
  /**
   * @param {object} options
   * @param {object} options.client  an ioredis or node-redis client
   * @param {"ANCHORED"|"FIXED"|"SLIDING"|"LOG"} [options.algorithm]  see above
   * @param {string} [options.prefix]  prepended to every key
   * @param {number} [options.timeout]  ms a call waits at most (1000)
   * @param {"throw"|"allow"|"deny"} [options.onError]  when the server fails: "throw" (the
   *   default) hands the error to express-rate-limit, whose `passOnStoreError` decides;
   *   "allow" admits; "deny" answers 503 with Retry-After
   * @param {number} [options.cooldown]  ms after a failure without asking the server (1000)
   * @param {object} [options.metrics]  a PrometheusMetrics (./metrics): decisions under the
   *   policy "express" (with a numeric limit) and server calls
   * @param {boolean} [options.shadow]  a refused request goes through, counted as "shadow"
   *   and logged (with a numeric limit)
   */
  constructor({
    client,
    algorithm = "ANCHORED",
    prefix = "rl:",
    timeout = 1000,
    onError = "throw",
    cooldown = 1000,
    metrics = null,
    shadow = false,
    logger = console,
  }) {
    this.circuit = new Circuit({ onError, cooldown, logger });
    Object.assign(this, { metrics, shadow, logger });
    this.client = client;
    this.send = guardedSender(client, commandSender(client), this.circuit, timeout);
    this.algorithm = algorithm;
    this.prefix = prefix;
    this.localKeys = false;
    // express-rate-limit's defaults, until `init` gives its options.
    this.windowMs = 60_000;
    this.limit = 5;
    // Module-decided algorithms: refused requests express-rate-limit may still decrement,
    // per key, with when each one's window ends (after which it no longer decrements it).
    this.uncounted = new Map();
  }

  /** Called by express-rate-limit with its options: the window, the limit, and whether it
   * decrements failed requests, a refused one (429) among them. */
  init(options) {
    this.windowMs = options.windowMs;
    this.limit = options.limit;
    this.decrementsRefused = Boolean(options.skipFailedRequests);
  }

  get counting() {
    return this.algorithm === "ANCHORED";
  }

  limitFor() {
    if (typeof this.limit !== "number") {
      throw new TypeError(
        `RateLimitModuleStore with ${this.algorithm} needs a number for \`limit\`: the module decides with it`,
      );
    }
    return this.limit;
  }

  command(key, quantity, extra = [], readOnly = false) {
    const suffix = readOnly ? "_RO" : "";
    if (this.counting) {
      return ["RL.WINDOW", this.prefix + key, UNBOUNDED, this.windowMs, quantity, "ANCHORED", "MS", ...extra];
    }
    if (this.algorithm === "LOG") {
      return ["RL.LOG" + suffix, this.prefix + key, this.limitFor(), this.windowMs, quantity, "MS", ...extra];
    }
    return [
      "RL.WINDOW" + suffix,
      this.prefix + key,
      this.limitFor(),
      this.windowMs,
      quantity,
      this.algorithm,
      "MS",
      ...extra,
    ];
  }

  /** Sends `args`; when the server fails, what onError says: the reply's stand-in (allow),
   * an error express answers 503 (deny), or the error (throw). */
  async call(args, whenAllowed) {
    const started = performance.now();
    try {
      const reply = (await this.send(args)).map(Number);
      if (this.metrics) this.metrics.serverCall((performance.now() - started) / 1000);
      return reply;
    } catch (error) {
      if (!(error instanceof ServerUnavailable) || this.circuit.onError === "throw") throw error;
      this.metrics?.decision("express", this.circuit.onError === "allow" ? "failed_open" : "failed_closed");
      if (this.circuit.onError === "allow") return whenAllowed;
      throw Object.assign(new Error("Service Unavailable: the rate limiter's server failed", { cause: error }), {
        status: 503,
        expose: true,
        headers: { "Retry-After": String(Math.max(1, Math.ceil(error.retryAfter))) },
      });
    }
  }

  async increment(key) {
    if (!this.counting && this.limitFor() === 0) {
      // express-rate-limit's `limit: 0` refuses everything; the module has no such limit.
      return { totalHits: 1, resetTime: new Date(Date.now() + this.windowMs) };
    }
    const allowed = this.counting
      ? [0, UNBOUNDED, UNBOUNDED - 1, -1, this.windowMs]
      : [0, this.limit, this.limit - 1, -1, this.windowMs];
    const reply = await this.call(this.command(key, 1), allowed);
    if (reply === allowed) return { totalHits: 1, resetTime: new Date(Date.now() + this.windowMs) };
    const [limited, limit, remaining, , resetAfter] = reply;
    const resetTime = new Date(Date.now() + resetAfter);
    if (this.counting) return this.observed(key, { totalHits: UNBOUNDED - remaining, resetTime });
    // What was counted, and one more than the limit for a refused request (which the module
    // did not count), as express-rate-limit reads totalHits.
    const info = { totalHits: limited === 1 ? limit + 1 : limit - remaining, resetTime };
    if (limited === 1 && this.decrementsRefused) {
      // express-rate-limit will decrement this refusal, which the module never counted: the
      // decrement must give nothing back (it would return an admitted request). It is
      // decremented before its window ends (resetTime) or never; a second's grace keeps the
      // two clocks' reading of "ends" from returning an admitted request.
      const pending = this.pending(key);
      pending.push(resetTime.getTime() + 1_000);
      this.uncounted.set(key, pending);
      if (this.uncounted.size > 10_000) this.sweep();
    }
    return this.observed(key, info);
  }

  /** Counts a decision (when the limit is a number, the decision is known here) and, in
   * shadow mode, reports a refused request at the limit, which express-rate-limit admits. */
  observed(key, info) {
    if (typeof this.limit !== "number") return info;
    const refused = info.totalHits > this.limit;
    const outcome = refused ? (this.shadow ? "shadow" : "refused") : "allowed";
    this.metrics?.decision("express", outcome);
    if (outcome !== "shadow") return info;
    this.logger.warn?.(`rate limiter: shadow: express would refuse ${key}`);
    return { ...info, totalHits: this.limit };
  }

  async get(key) {
    if (this.counting) {
      const [, , current, currentEndsIn] = await this.call(
        ["RL.WINDOW.COUNTS", this.prefix + key, this.windowMs, "ANCHORED", "MS"],
        [0, 0, 0, 0],
      );
      // A key decremented to zero still runs its window (MemoryStore's answer); none, no key.
      return currentEndsIn > 0 ? { totalHits: current, resetTime: new Date(Date.now() + currentEndsIn) } : undefined;
    }
    if (this.limitFor() === 0) return undefined;
    const reply = await this.call(this.command(key, 0, [], true), [0, this.limit, this.limit, -1, 0]);
    return { totalHits: reply[1] - reply[2], resetTime: new Date(Date.now() + reply[4]) };
  }

  async decrement(key) {
    const pending = this.pending(key);
    if (pending.length > 0) {
      pending.shift();
      if (pending.length === 0) this.uncounted.delete(key);
      return;
    }
    if (!this.counting && this.limitFor() === 0) return;
    // A failed decrement gives nothing back; only "throw" reports it.
    await this.call(this.command(key, 1, ["REFUND"]), []).catch((error) => {
      if (this.circuit.onError === "throw") throw error;
    });
  }

  async resetKey(key) {
    this.uncounted.delete(key);
    await this.send(["DEL", this.prefix + key]);
  }

  /** Deletes every key of this store (its prefix), on every primary of a Cluster: what
   * MemoryStore's resetAll does. SCAN, so the server is never held long. */
  async resetAll() {
    this.uncounted.clear();
    const pattern = `${this.prefix.replace(/[*?[\]\\]/g, "\\$&")}*`;
    const primaries = (await primarySenders(this.client)) ?? [commandSender(this.client)];
    for (const scan of primaries) {
      let cursor = "0";
      do {
        const [next, keys] = await scan(["SCAN", cursor, "MATCH", pattern, "COUNT", 1000]);
        cursor = String(next);
        // One key a call: on a Cluster the keys of one node are in many slots.
        for (const key of keys) await this.send(["UNLINK", String(key)]);
      } while (cursor !== "0");
    }
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
