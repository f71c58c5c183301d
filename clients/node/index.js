// The Node client of the redis-ratelimit module: typed results for every command and option
// over ioredis or node-redis (clients and clusters), the failure policy, the deny cache,
// quota leases and the shared lists. What it sends and reads is ./protocol's, the HTTP fields
// ./fields'. The framework adapters: ./express (express-rate-limit) and ./nestjs
// (@nestjs/throttler).
"use strict";

const { markOwn } = require("./answered");
const { Circuit, DenyCache, ServerUnavailable, guardedSender } = require("./resilience");
const { Quota } = require("./quota");

const protocol = require("./protocol");
const { headers } = require("./fields");

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
        ? JSON.stringify(protocol.commandFor(limiters, { ...options, quantity: 0 }, readOnly))
        : null;
    const quantity = options.quantity ?? 1;
    if (cacheKey) {
      const cached = this.denyCache.get(cacheKey, quantity);
      if (cached) return this.refused(policy, limiters, cached, "deny_cache", shadow);
    }
    const started = performance.now();
    let reply;
    try {
      reply = await this.send(protocol.commandFor(limiters, options, readOnly));
    } catch (error) {
      if (!(error instanceof ServerUnavailable) || this.circuit.onError === "throw") throw error;
      const allowed = this.circuit.onError === "allow";
      this.count(policy, allowed ? "failed_open" : "failed_closed");
      return failureResult(allowed, error.retryAfter);
    }
    if (this.metrics) this.metrics.serverCall((performance.now() - started) / 1000);
    const result = protocol.resultOf(reply, limiters, options);
    // A request shed by load is a draw, not a standing refusal: never cached.
    if (cacheKey && !result.shedLevel) this.denyCache.put(cacheKey, quantity, result);
    if (result.shedLevel) markOwn();
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
    return protocol.countsOf(limiter, await this.send(protocol.countsCommand(limiter)));
  }

  /**
   * RL.ACQUIRE: `quantity` of `limit` slots for `lease` seconds; `id` is 0 when refused.
   * Leases follow the failure policy: while the server fails, onError "allow" grants a
   * lease with id 0 (`result.failed`: nothing to release), "deny" refuses it, "throw"
   * throws ServerUnavailable.
   */
  async acquireLease(key, limit, lease, quantity = 1) {
    return this.lease(protocol.leaseCommand(key, limit, lease, quantity));
  }

  /** RL.ACQUIRE_RO: what acquireLease would answer, taking nothing (`id` 0). */
  async peekLease(key, limit, lease, quantity = 1) {
    return this.lease(protocol.leaseCommand(key, limit, lease, quantity, true));
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
    const lease = protocol.leaseOf(reply);
    this.count("lease", lease.allowed ? "allowed" : "refused");
    return lease;
  }

  /** RL.RELEASE: frees a lease at once; false when it was no longer held, or when the
   * server was not reached (the lease ends at its expiry). */
  async releaseLease(key, id) {
    if (Number(id) === 0) return false; // granted without the server: nothing to free
    return this.held(protocol.releaseCommand(key, id), false);
  }

  /** RL.RENEW: extends a held lease to `lease` seconds from now; while the server fails,
   * true under onError "allow" (keep working), false under "deny". */
  async renewLease(key, id, lease) {
    if (Number(id) === 0) return this.held(null, true);
    return this.held(protocol.renewCommand(key, id, lease), true);
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
    return protocol.topKeys(replies, count);
  }
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
    await this.transaction(this.hash, protocol.addCommands(this.hash, list, item, value));
  }

  /** Removes `item` from `list` and increments the version, in one transaction. */
  async remove(list, item) {
    await this.transaction(this.hash, protocol.removeCommands(this.hash, list, item));
  }

  /** The lists, `{ list: { item: value } }`: the copy, checked against the version at most once per `every` seconds. */
  async read() {
    if (this.clock() < this.nextCheck) return this.lists;
    const version = await this.send(["HGET", this.hash, "version"]);
    if (this.version === undefined || version !== this.version) {
      this.lists = protocol.parseLists(protocol.hashOf(await this.send(["HGETALL", this.hash])));
      this.version = version;
    }
    this.nextCheck = this.clock() + this.every;
    return this.lists;
  }
}

module.exports = {
  ...protocol,
  primarySenders,
  RateLimiter,
  Quota,
  SharedLists,
  ServerUnavailable,
  headers,
  commandSender,
  policyName,
};
