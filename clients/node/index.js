// The Node client of the redis-ratelimit module: typed results for every command and option
// over ioredis or node-redis (clients and clusters), the IETF RateLimit fields, and
// acquire(timeout). The framework adapters: ./express (express-rate-limit) and ./nestjs
// (@nestjs/throttler).
//
// Times are asked of the module in milliseconds and given in seconds; the header fields round
// them up, so a client that waits them is never early.
"use strict";

const { Circuit, DenyCache, ServerUnavailable, guardedSender } = require("./resilience");
const { Quota } = require("./quota");

const millis = (seconds) => Math.max(1, Math.round(seconds * 1000));

/**
 * A function that sends one command and resolves with its reply, for ioredis (`Redis`,
 * `Cluster`: `call`) and node-redis (a client: `sendCommand(args)`; a cluster:
 * `sendCommand(firstKey, isReadonly, args)`).
 */
function commandSender(client) {
  if (typeof client.call === "function") return (args) => client.call(...args);
  if (typeof client.sendCommand === "function") {
    if (client.sendCommand.length >= 3) {
      return (args) => client.sendCommand(keyOf(args), args[0].endsWith("_RO"), args.map(String));
    }
    return (args) => client.sendCommand(args.map(String));
  }
  throw new TypeError("expected an ioredis or node-redis client");
}

/**
 * On a Cluster (ioredis or node-redis), a function per primary that sends it one command;
 * null for a single server.
 */
async function primarySenders(client) {
  if (typeof client.nodes === "function") {
    return client.nodes("master").map((node) => (args) => node.call(...args));
  }
  if (Array.isArray(client.masters)) {
    const nodes = await Promise.all(client.masters.map((master) => client.nodeClient(master)));
    return nodes.map((node) => (args) => node.sendCommand(args.map(String)));
  }
  return null;
}

/**
 * A function that runs several commands as one transaction (MULTI/EXEC) and resolves with
 * their replies: ioredis' `multi()` (a Cluster sends it to the keys' node) and node-redis'
 * (a cluster's `multi(firstKey)` routes it to that key's node).
 */
function transactionSender(client) {
  if (typeof client.call === "function") {
    return async (key, commands) => {
      const multi = client.multi();
      for (const args of commands) multi.call(...args);
      const replies = await multi.exec();
      if (replies === null) throw new Error("the transaction was aborted");
      for (const [error] of replies) if (error) throw error;
      return replies.map(([, reply]) => reply);
    };
  }
  if (typeof client.multi === "function") {
    const cluster = client.sendCommand.length >= 3;
    return async (key, commands) => {
      const multi = cluster ? client.multi(key) : client.multi();
      for (const args of commands) {
        const strings = args.map(String);
        if (cluster) multi.addCommand(key, false, strings);
        else multi.addCommand(strings);
      }
      return multi.exec();
    };
  }
  throw new TypeError("expected an ioredis or node-redis client");
}

// The first key of a limiter command: after the name, or after RL.ALL's numkeys.
const keyOf = (args) => String(args[0].startsWith("RL.ALL") ? args[2] : args[1]);

/** GCRA (CL.THROTTLE): `count` per `period` seconds, in bursts of `maxBurst + 1`. */
function throttle(key, maxBurst, count, period, { warmup = null, name = "burst" } = {}) {
  return {
    command: "CL.THROTTLE",
    inAll: "THROTTLE",
    key,
    name,
    args: [maxBurst, count, millis(period)],
    keywords: warmup === null ? [] : ["WARMUP", millis(warmup)],
    windowSeconds: ((maxBurst + 1) * period) / count,
  };
}

/** A window counter (RL.WINDOW): `limit` per `seconds`, "SLIDING", "FIXED" or "BUCKETS n". */
function window(key, limit, seconds, { algorithm = "SLIDING", name = "window" } = {}) {
  return {
    command: "RL.WINDOW",
    inAll: "WINDOW",
    key,
    name,
    args: [limit, millis(seconds)],
    keywords: algorithm.split(" "),
    windowSeconds: seconds,
  };
}

/** An exact sliding log (RL.LOG): at most `limit` in any `seconds`. */
function log(key, limit, seconds, { name = "log" } = {}) {
  return {
    command: "RL.LOG",
    inAll: "LOG",
    key,
    name,
    args: [limit, millis(seconds)],
    keywords: [],
    windowSeconds: seconds,
  };
}

/**
 * The load gate of a service (LOAD priority in RL.ALL): `key` is the service's, which its
 * instances' reports fill (./load); the level they set admits a share of each priority class,
 * and a request it sheds is refused with nothing written (`shedLevel`).
 */
function load(key, priority = "sheddable") {
  return {
    command: "RL.ALL",
    inAll: "LOAD",
    key,
    name: "load",
    args: [priority],
    keywords: [],
    windowSeconds: 0,
    gate: true,
  };
}

/**
 * A concurrency limit in RL.ALL (LEASE limit lease): at most `limit` leases held at once on
 * `key`, each for `seconds`, taken only if every other limiter admits; the result's
 * `leaseId` releases or renews it (RL.ACQUIRE's state: the lease calls work on the key).
 */
function slots(key, limit, seconds, { name = "slots" } = {}) {
  return {
    command: "RL.ALL",
    inAll: "LEASE",
    key,
    name,
    args: [limit, millis(seconds)],
    keywords: [],
    windowSeconds: seconds,
    onlyInAll: true,
  };
}

/** The limiters that limit a rate (the HTTP fields' policies): not a load gate. */
const rateLimiters = (limiters) => limiters.filter((one) => !one.gate);

/** Reads `[limited, limit, remaining, retry_after, reset_after]` given in ms. */
function fromReply(reply, { each = [], waitMs = 0, granted = null } = {}) {
  const [limited, limit, remaining, retryAfter, resetAfter] = reply.slice(0, 5).map(Number);
  return {
    allowed: limited === 0,
    limit,
    remaining,
    retryAfter: retryAfter < 0 ? null : retryAfter / 1000,
    resetAfter: resetAfter / 1000,
    wait: waitMs / 1000,
    granted,
    each,
    failed: false,
    shadow: false,
    shedLevel: 0,
    leaseId: 0,
  };
}

/** The words after a limiter's arguments for a request's options (docs/options.md). */
function optionWords({ quantity = 1, refund = false, block = null, delay = null, atMost = false, force = false }) {
  const words = [quantity, "MS"];
  if (block !== null) words.push("BLOCK", millis(block));
  if (delay !== null) words.push("DELAY", Math.max(0, Math.round(delay * 1000)));
  if (atMost) words.push("AT_MOST");
  if (force) words.push("FORCE");
  if (refund) words.push("REFUND");
  return words;
}

/** The one command for a request against `limiters`. */
function commandFor(limiters, options, readOnly = false) {
  if (limiters.length === 0) throw new RangeError("at least one limiter");
  const suffix = readOnly ? "_RO" : "";
  if (limiters.length === 1 && !limiters[0].gate && !limiters[0].onlyInAll) {
    const [one] = limiters;
    return [one.command + suffix, one.key, ...one.args, ...optionWords(options), ...one.keywords];
  }
  const args = ["RL.ALL" + suffix, limiters.length, ...limiters.map((one) => one.key)];
  for (const one of limiters) args.push(one.inAll, ...one.args, ...one.keywords);
  return [...args, ...optionWords(options), "DETAILS"];
}

/** The typed result of commandFor's reply: the five integers, a sixth (a wait, a quantity
 * granted, a lease's id), then with a load gate the level that shed the request, then each
 * limiter's own. */
function resultOf(reply, limiters, options) {
  const leased = limiters.some((one) => one.inAll === "LEASE");
  const sixth = options.delay != null || options.atMost || leased ? Number(reply[5]) : null;
  let first = sixth === null ? 5 : 6;
  const gate = limiters.some((one) => one.gate);
  const shedLevel = gate ? Number(reply[first]) : 0;
  if (gate) first += 1;
  const each =
    limiters.length > 1
      ? reply
          .slice(first)
          .filter((_, i) => !limiters[i].gate)
          .map((one) => fromReply(one))
      : [];
  const result = fromReply(reply, {
    each,
    waitMs: options.delay != null ? sixth : 0,
    granted: options.atMost ? sixth : null,
  });
  return { ...result, shedLevel, leaseId: leased ? sixth : 0 };
}

/** RL.WINDOW.COUNTS or RL.LOG.COUNTS for a FIXED or SLIDING window, or a log. */
function countsCommand(limiter) {
  const windowMs = limiter.args[1];
  if (limiter.command === "RL.LOG") return ["RL.LOG.COUNTS", limiter.key, windowMs, "MS"];
  const [algorithm] = limiter.keywords;
  if (
    limiter.command === "RL.WINDOW" &&
    limiter.keywords.length === 1 &&
    ["FIXED", "SLIDING", "ANCHORED"].includes(algorithm)
  ) {
    return ["RL.WINDOW.COUNTS", limiter.key, windowMs, algorithm, "MS"];
  }
  throw new RangeError("counts are read from a FIXED, SLIDING or ANCHORED window, or a log");
}

/** The typed reply of countsCommand(limiter), times in seconds. */
function countsOf(limiter, reply) {
  const values = reply.map(Number);
  if (limiter.command === "RL.LOG") {
    return { count: values[0], oldestEndsIn: values[1] / 1000, newestEndsIn: values[2] / 1000 };
  }
  return {
    previous: values[0],
    previousEndsIn: values[1] / 1000,
    current: values[2],
    currentEndsIn: values[3] / 1000,
  };
}

/** RL.TOP's replies from every primary, merged (a key lives on one), most refused first. */
function topKeys(replies, count) {
  const merged = new Map();
  for (const reply of replies) {
    for (const [key, refusals, error] of reply) {
      const row = merged.get(String(key)) ?? { key: String(key), refusals: 0, error: 0 };
      row.refusals += Number(refusals);
      row.error += Number(error);
      merged.set(row.key, row);
    }
  }
  return [...merged.values()]
    .sort((a, b) => b.refusals - a.refusals || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    .slice(0, count);
}

/** RL.ACQUIRE (or RL.ACQUIRE_RO, which takes nothing): `quantity` of `limit` slots for `lease` s. */
const leaseCommand = (key, limit, lease, quantity = 1, readOnly = false) => [
  readOnly ? "RL.ACQUIRE_RO" : "RL.ACQUIRE",
  key,
  limit,
  millis(lease),
  quantity,
  "MS",
];

/** RL.RELEASE: frees a held lease. */
const releaseCommand = (key, id) => ["RL.RELEASE", key, id];

/** RL.RENEW: extends a held lease to `lease` seconds from now. */
const renewCommand = (key, id, lease) => ["RL.RENEW", key, id, millis(lease), "MS"];

/** RL.ACQUIRE's reply: the five fields and the lease's id (0 when refused). */
const leaseOf = (reply) => ({ result: fromReply(reply), allowed: Number(reply[0]) === 0, id: Number(reply[5]) });

/** The transaction that sets `item` of `list` (the shared lists' hash) and bumps the version. */
const addCommands = (hash, list, item, value = "1") => [
  ["HSET", hash, `${list}:${item}`, value],
  ["HINCRBY", hash, "version", 1],
];

/** The transaction that removes `item` from `list` and bumps the version. */
const removeCommands = (hash, list, item) => [
  ["HDEL", hash, `${list}:${item}`],
  ["HINCRBY", hash, "version", 1],
];

/** What `onError` decides without the server: nothing counted, no fields to send. */
function failureResult(allowed, retryAfter) {
  return {
    allowed,
    limit: 0,
    remaining: 0,
    retryAfter: allowed ? null : retryAfter,
    resetAfter: 0,
    wait: 0,
    granted: null,
    each: [],
    failed: true,
    shadow: false,
    shedLevel: 0,
  };
}

/** The policy a decision is counted under: the limiters' names, joined by "+". */
const policyName = (limiters) => limiters.map((one) => one.name).join("+");

/**
 * Every command of the module on one client, with typed results.
 *
 * Options: `timeout` (ms, 1000): the most a call waits, and it never waits on a reconnecting
 * client's offline queue; `onError` ("throw", the default, "allow" or "deny"): what a
 * decision is when the server fails, "allow" admitting and "deny" refusing (`failed: true`,
 * nothing counted); `cooldown` (ms, 1000): how long after a failure decisions are taken that
 * way without asking; `denyCache` (a number of keys): standing refusals answered locally;
 * `metrics` (a PrometheusMetrics from ./metrics): decisions counted and server calls timed;
 * `shadow`: refused requests let through, counted as "shadow" and logged.
 */
class RateLimiter {
  constructor(
    client,
    {
      timeout = 1000,
      onError = "throw",
      cooldown = 1000,
      denyCache = 0,
      metrics = null,
      shadow = false,
      clock = Date.now,
      logger = console,
    } = {},
  ) {
    this.client = client;
    this.circuit = new Circuit({ onError, cooldown, clock, logger });
    this.send = guardedSender(client, commandSender(client), this.circuit, timeout);
    this.denyCache = denyCache > 0 ? new DenyCache(denyCache, clock) : null;
    Object.assign(this, { metrics, shadow, logger });
  }

  count(policy, outcome) {
    if (this.metrics) this.metrics.decision(policy, outcome);
  }

  /** One decision: from the deny cache, from the server, or by onError; counted, and let
   * through in shadow mode when refused (`options.shadow` overrides the limiter's). */
  async decide(limiters, options, readOnly = false) {
    const policy = policyName(limiters);
    const shadow = options.shadow ?? this.shadow;
    const cacheKey =
      this.denyCache && !options.refund && !options.force
        ? JSON.stringify(commandFor(limiters, { ...options, quantity: 0 }, readOnly))
        : null;
    const quantity = options.quantity ?? 1;
    if (cacheKey) {
      const cached = this.denyCache.get(cacheKey, quantity);
      if (cached) return this.refused(policy, limiters, cached, "deny_cache", shadow);
    }
    const started = performance.now();
    let reply;
    try {
      reply = await this.send(commandFor(limiters, options, readOnly));
    } catch (error) {
      if (!(error instanceof ServerUnavailable) || this.circuit.onError === "throw") throw error;
      const allowed = this.circuit.onError === "allow";
      this.count(policy, allowed ? "failed_open" : "failed_closed");
      return failureResult(allowed, error.retryAfter);
    }
    if (this.metrics) this.metrics.serverCall((performance.now() - started) / 1000);
    const result = resultOf(reply, limiters, options);
    // A request shed by load is a draw, not a standing refusal: never cached.
    if (cacheKey && !result.shedLevel) this.denyCache.put(cacheKey, quantity, result);
    if (!result.allowed) {
      return this.refused(policy, limiters, result, result.shedLevel ? "shed" : "refused", shadow);
    }
    this.count(policy, result.wait > 0 ? "delayed" : "allowed");
    return result;
  }

  refused(policy, limiters, result, outcome, shadow) {
    if (!shadow) {
      this.count(policy, outcome);
      return result;
    }
    this.count(policy, "shadow");
    this.logger.warn?.(`rate limiter: shadow: ${policy} would refuse ${limiters.map((one) => one.key).join(", ")}`);
    return { ...result, allowed: true, shadow: true };
  }

  /** One request against every limiter, all or nothing, in one call. */
  async check(limiters, options = {}) {
    return this.decide(limiters, options);
  }

  /** What `check` would answer now, without writing (the _RO variants). */
  async peek(limiters, { quantity = 1 } = {}) {
    return this.decide(limiters, { quantity }, true);
  }

  /**
   * Waits for a slot, as Guava's `tryAcquire(timeout)`: one call with DELAY, then a sleep of
   * the wait the module gives; resolves at once, refused, when the turn is further than
   * `timeout` seconds away. No polling: the module keeps the queue.
   */
  async acquire(limiters, { quantity = 1, timeout = 0 } = {}) {
    const result = await this.check(limiters, { quantity, delay: timeout });
    if (result.allowed && result.wait > 0) {
      await new Promise((resolve) => setTimeout(resolve, result.wait * 1000));
    }
    return result;
  }

  /** What a FIXED or SLIDING window or a log counts (RL.WINDOW.COUNTS, RL.LOG.COUNTS). */
  async counts(limiter) {
    return countsOf(limiter, await this.send(countsCommand(limiter)));
  }

  /**
   * RL.ACQUIRE: `quantity` of `limit` slots for `lease` seconds; `id` is 0 when refused.
   * Leases follow the failure policy: while the server fails, onError "allow" grants a
   * lease with id 0 (`result.failed`: nothing to release), "deny" refuses it, "throw"
   * throws ServerUnavailable.
   */
  async acquireLease(key, limit, lease, quantity = 1) {
    return this.lease(leaseCommand(key, limit, lease, quantity));
  }

  /** RL.ACQUIRE_RO: what acquireLease would answer, taking nothing (`id` 0). */
  async peekLease(key, limit, lease, quantity = 1) {
    return this.lease(leaseCommand(key, limit, lease, quantity, true));
  }

  async lease(args) {
    const started = performance.now();
    let reply;
    try {
      reply = await this.send(args);
    } catch (error) {
      if (!(error instanceof ServerUnavailable) || this.circuit.onError === "throw") throw error;
      const allowed = this.circuit.onError === "allow";
      this.count("lease", allowed ? "failed_open" : "failed_closed");
      return { result: failureResult(allowed, error.retryAfter), allowed, id: 0 };
    }
    if (this.metrics) this.metrics.serverCall((performance.now() - started) / 1000);
    const lease = leaseOf(reply);
    this.count("lease", lease.allowed ? "allowed" : "refused");
    return lease;
  }

  /** RL.RELEASE: frees a lease at once; false when it was no longer held, or when the
   * server was not reached (the lease ends at its expiry). */
  async releaseLease(key, id) {
    if (Number(id) === 0) return false; // granted without the server: nothing to free
    return this.held(releaseCommand(key, id), false);
  }

  /** RL.RENEW: extends a held lease to `lease` seconds from now; while the server fails,
   * true under onError "allow" (keep working), false under "deny". */
  async renewLease(key, id, lease) {
    if (Number(id) === 0) return this.held(null, true);
    return this.held(renewCommand(key, id, lease), true);
  }

  /** A release or renewal (`args`; null: none to send): the server's answer, or the
   * failure policy's. */
  async held(args, renewing) {
    try {
      if (args === null) throw this.circuit.unavailable();
      return Number(await this.send(args)) === 1;
    } catch (error) {
      if (!(error instanceof ServerUnavailable) || this.circuit.onError === "throw") throw error;
      return renewing && this.circuit.onError === "allow";
    }
  }

  /**
   * RL.TOP: the keys refused most over the current and the previous minute, on the server,
   * or merged from every primary of a Cluster (ioredis or node-redis): `{ key, refusals,
   * error }`, most refused first.
   */
  async top(count = 10) {
    const replies = [];
    const primaries = await primarySenders(this.client);
    if (primaries === null) replies.push(await this.send(["RL.TOP", count]));
    else for (const send of primaries) replies.push(await send(["RL.TOP", count]));
    return topKeys(replies, count);
  }
}

// Whole seconds, rounded up: a client that waits this long is never early.
const seconds = (value) => Math.ceil(value - 1e-9);

/**
 * The IETF fields (draft-ietf-httpapi-ratelimit-headers-11) for a result: RateLimit-Policy,
 * RateLimit and, when refused, Retry-After; with `legacy`, RateLimit-Limit, -Remaining, -Reset.
 */
function headers(result, allLimiters, { legacy = false } = {}) {
  const limiters = rateLimiters(allLimiters);
  const each = result.each.length > 0 ? result.each : [result];
  const fields = {
    "RateLimit-Policy": limiters
      .map((one, i) => `"${one.name}";q=${each[i].limit};w=${seconds(one.windowSeconds)}`)
      .join(", "),
    RateLimit: limiters
      .map((one, i) => `"${one.name}";r=${each[i].remaining};t=${seconds(each[i].resetAfter)}`)
      .join(", "),
  };
  if (!result.allowed && result.retryAfter !== null) fields["Retry-After"] = String(seconds(result.retryAfter));
  if (legacy) {
    fields["RateLimit-Limit"] = String(result.limit);
    fields["RateLimit-Remaining"] = String(result.remaining);
    fields["RateLimit-Reset"] = String(seconds(result.resetAfter));
  }
  return fields;
}

/** `{ list: { item: value } }` from a hash's fields (`version` and fields without ":" are not lists). */
function parseLists(flat) {
  const lists = {};
  for (const [field, value] of Object.entries(flat)) {
    const colon = field.indexOf(":");
    if (colon < 0) continue;
    const name = field.slice(0, colon);
    (lists[name] ??= {})[field.slice(colon + 1)] = String(value);
  }
  return lists;
}

/** HGETALL's reply as an object: a flat array over RESP2, a Map or an object over RESP3. */
function hashOf(reply) {
  if (reply instanceof Map) return Object.fromEntries(reply);
  if (!Array.isArray(reply)) return reply ?? {};
  const object = {};
  for (let i = 0; i < reply.length; i += 2) object[String(reply[i])] = reply[i + 1];
  return object;
}

/**
 * Lists shared by every gateway and application through one hash: fields `<list>:<item>`
 * and a `version` that every change increments (the nginx package's
 * resty.ratelimit_module.lists reads and writes the same hash). A reader keeps a copy and asks
 * only for the version, at most once per `every` seconds, reading the hash again when it
 * changed. A change increments the version after writing its item, so a reader that saw the
 * new version reads the new item.
 */
class SharedLists {
  constructor(client, hash, { every = 1, clock = () => performance.now() / 1000 } = {}) {
    this.send = commandSender(client);
    this.transaction = transactionSender(client);
    this.hash = hash;
    this.every = every;
    this.clock = clock;
    this.lists = {};
    this.version = undefined;
    this.nextCheck = -Infinity;
  }

  /** Sets `item` of `list` to `value` and increments the version, in one transaction. */
  async add(list, item, value = "1") {
    await this.transaction(this.hash, addCommands(this.hash, list, item, value));
  }

  /** Removes `item` from `list` and increments the version, in one transaction. */
  async remove(list, item) {
    await this.transaction(this.hash, removeCommands(this.hash, list, item));
  }

  /** The lists, `{ list: { item: value } }`: the copy, checked against the version at most once per `every` seconds. */
  async read() {
    if (this.clock() < this.nextCheck) return this.lists;
    const version = await this.send(["HGET", this.hash, "version"]);
    if (this.version === undefined || version !== this.version) {
      this.lists = parseLists(hashOf(await this.send(["HGETALL", this.hash])));
      this.version = version;
    }
    this.nextCheck = this.clock() + this.every;
    return this.lists;
  }
}

module.exports = {
  primarySenders,
  RateLimiter,
  Quota,
  SharedLists,
  ServerUnavailable,
  throttle,
  window,
  log,
  load,
  slots,
  rateLimiters,
  leaseCommand,
  releaseCommand,
  renewCommand,
  leaseOf,
  addCommands,
  removeCommands,
  countsCommand,
  countsOf,
  topKeys,
  fromReply,
  headers,
  commandSender,
  commandFor,
  resultOf,
  policyName,
};
