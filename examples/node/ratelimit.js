// A small helper over ioredis for the ratelimit module: each command's reply as a typed
// result, and the HTTP RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11) made from it.
//
//     const { throttle, window, check, headers } = require("./ratelimit");
//     const result = await check(redis, [throttle("api:alice", 9, 10, 1)]);
//     if (!result.allowed) { /* answer 429 with headers(result, limiters) */ }
//
// Times are asked of the module in milliseconds and given in seconds; the header fields round
// them up to whole seconds, so a client that waits them is never early.
"use strict";

/**
 * What every limiter command answers, typed.
 * @typedef {object} RateLimit
 * @property {boolean} allowed        admitted, and counted; false: refused, and not counted
 * @property {number} limit           the most admitted at once
 * @property {number} remaining       how much more would be admitted right now
 * @property {number|null} retryAfter seconds until a refused request fits; null if admitted or never
 * @property {number} resetAfter      seconds until the limiter is back to full capacity
 * @property {RateLimit[]} each       RL.ALL: each limiter's own result, in order (else empty)
 */

/**
 * A limiter: its command, key, arguments, keywords, its keyword in RL.ALL, the policy's name
 * and window (seconds) in the HTTP fields.
 * @typedef {object} Limiter
 */

const millis = (seconds) => Math.max(1, Math.round(seconds * 1000));

/** GCRA (CL.THROTTLE): `count` per `period` seconds, in bursts of `maxBurst + 1`. */
function throttle(key, maxBurst, count, period, name = "burst") {
  return {
    command: "CL.THROTTLE", inAll: "THROTTLE", key, name,
    args: [maxBurst, count, millis(period)], keywords: [],
    windowSeconds: ((maxBurst + 1) * period) / count,
  };
}

/** A window counter (RL.WINDOW): `limit` per `seconds`, "SLIDING", "FIXED" or "BUCKETS n". */
function window(key, limit, seconds, algorithm = "SLIDING", name = "window") {
  return {
    command: "RL.WINDOW", inAll: "WINDOW", key, name,
    args: [limit, millis(seconds)], keywords: algorithm.split(" "), windowSeconds: seconds,
  };
}

/** An exact sliding log (RL.LOG): at most `limit` in any `seconds`. */
function log(key, limit, seconds, name = "log") {
  return {
    command: "RL.LOG", inAll: "LOG", key, name,
    args: [limit, millis(seconds)], keywords: [], windowSeconds: seconds,
  };
}

/**
 * Reads `[limited, limit, remaining, retry_after, reset_after]` given in ms.
 * @returns {RateLimit}
 */
function fromReply([limited, limit, remaining, retryAfter, resetAfter], each = [], waitMs = null) {
  return {
    allowed: limited === 0,
    limit,
    remaining,
    retryAfter: retryAfter < 0 ? null : retryAfter / 1000,
    resetAfter: resetAfter / 1000,
    each,
    // With a delay allowed: seconds to wait before going ahead (0: at once, or refused).
    ...(waitMs === null ? {} : { wait: waitMs / 1000 }),
  };
}

/**
 * One request against every limiter, all or nothing: one limiter's own command, or RL.ALL
 * (with each limiter's own result in `each`). With `delay` (seconds), a request that does
 * not fit now is admitted if its turn comes within `delay`, and `wait` says when.
 * @returns {Promise<RateLimit>}
 */
async function check(redis, limiters, quantity = 1, { refund = false, delay = null } = {}) {
  const options = [quantity, "MS", ...(refund ? ["REFUND"] : [])];
  if (delay !== null) options.push("DELAY", Math.max(0, Math.round(delay * 1000)));
  const waitOf = (reply) => (delay === null ? null : reply[5]);
  if (limiters.length === 1) {
    const [one] = limiters;
    const reply = await redis.call(one.command, one.key, ...one.args, ...options, ...one.keywords);
    return fromReply(reply, [], waitOf(reply));
  }
  const args = ["RL.ALL", limiters.length, ...limiters.map((one) => one.key)];
  for (const one of limiters) args.push(one.inAll, ...one.args, ...one.keywords);
  const reply = await redis.call(...args, ...options, "DETAILS");
  const first = delay === null ? 5 : 6;
  return fromReply(reply.slice(0, 5), reply.slice(first).map((one) => fromReply(one)), waitOf(reply));
}

/**
 * Waits for a slot, as Guava's `tryAcquire(timeout)` does: one call, then a sleep of the wait
 * the module gives. Resolves once the request may go ahead (`allowed`), or at once, refused,
 * when its turn would come later than `timeout` seconds. No polling: the module keeps the queue.
 * @returns {Promise<RateLimit>}
 */
async function acquireSlot(redis, limiters, quantity = 1, { timeout = 0 } = {}) {
  const result = await check(redis, limiters, quantity, { delay: timeout });
  if (result.allowed && result.wait > 0) {
    await new Promise((resolve) => setTimeout(resolve, result.wait * 1000));
  }
  return result;
}

/** RL.ACQUIRE: `quantity` of `limit` slots for `lease` seconds; `id` is 0 when refused. */
async function acquire(redis, key, limit, lease, quantity = 1) {
  const reply = await redis.call("RL.ACQUIRE", key, limit, millis(lease), quantity, "MS");
  return { result: fromReply(reply.slice(0, 5)), allowed: reply[0] === 0, id: reply[5] };
}

/** RL.RELEASE: frees a lease at once; false when it was no longer held. */
async function release(redis, key, id) {
  return (await redis.call("RL.RELEASE", key, id)) === 1;
}

/** RL.RENEW: extends a held lease to `lease` seconds from now; false when no longer held. */
async function renew(redis, key, id, lease) {
  return (await redis.call("RL.RENEW", key, id, millis(lease), "MS")) === 1;
}

/** Whole seconds, rounded up: a client that waits this long is never early. */
const seconds = (value) => Math.ceil(value - 1e-9);

/**
 * The HTTP fields for a result: `RateLimit-Policy` (one item per limiter, named by it),
 * `RateLimit`, and `Retry-After` when refused; with `legacy`, also the older
 * `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` of the binding limiter.
 * @returns {Record<string, string>}
 */
function headers(result, limiters, { legacy = false } = {}) {
  const each = result.each.length > 0 ? result.each : [result];
  const fields = {
    "RateLimit-Policy": limiters
      .map((one, i) => `"${one.name}";q=${each[i].limit};w=${seconds(one.windowSeconds)}`)
      .join(", "),
    RateLimit: limiters
      .map((one, i) => `"${one.name}";r=${each[i].remaining};t=${seconds(each[i].resetAfter)}`)
      .join(", "),
  };
  if (!result.allowed && result.retryAfter !== null) {
    fields["Retry-After"] = String(seconds(result.retryAfter));
  }
  if (legacy) {
    fields["RateLimit-Limit"] = String(result.limit);
    fields["RateLimit-Remaining"] = String(result.remaining);
    fields["RateLimit-Reset"] = String(seconds(result.resetAfter));
  }
  return fields;
}

module.exports = {
  throttle, window, log, fromReply, check, acquireSlot, acquire, release, renew, headers,
};
