// What the client and the adapters do when the server fails, and under a flood: a call
// bounded by a timeout that never waits on a reconnecting client's offline queue, a circuit
// that stops asking for a cool-down after a failure (a dead server costs one timeout per
// cool-down, not one per request) and then lets one call probe the server while the others
// keep deciding without it, errors logged at most once a second, and the deny cache.
// Failures are told from bad calls by type, not by their text. Clocks are injected (tests
// drive them).
"use strict";

const { markOwn, waitingOnServer } = require("./answered");

const ON_ERROR = ["allow", "deny", "throw"];

/** The server failed (unreachable, too slow, loading, failing over), or failed less than a
 * cool-down ago: not a refusal of a bad call. `retryAfter`: seconds until it is asked again. */
class ServerUnavailable extends Error {
  constructor(message, { cause, retryAfter = 0 } = {}) {
    super(message, { cause });
    this.name = "ServerUnavailable";
    this.retryAfter = retryAfter;
  }
}

/** The call had no answer within the timeout. */
class CallTimedOut extends Error {
  constructor(timeout) {
    super(`no answer within ${timeout} ms`);
    this.name = "CallTimedOut";
  }
}

// The error codes of replies that say the server cannot serve now, rather than that the
// call was wrong (a reply's code is its first word).
const UNAVAILABLE = new Set(["LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "BUSY"]);

/** Whether `error` is an error reply of the server (ioredis' ReplyError from redis-errors,
 * node-redis' ErrorReply and its subclasses), by type. */
function isReply(error) {
  for (let type = error; type; type = Object.getPrototypeOf(type)) {
    const name = type.constructor && type.constructor.name;
    if (name === "ReplyError" || name === "ErrorReply") return true;
  }
  return false;
}

/**
 * Whether a call's error means the server failed: a reply saying it cannot serve now, our
 * timeout, or anything that is not a reply (the connection refused, reset or closed, the
 * client closed: whatever the client library names it). A reply that the call is wrong,
 * and the TypeError or RangeError of a bad argument, are not failures.
 */
function serverFailed(error) {
  if (error instanceof CallTimedOut) return true;
  if (error instanceof TypeError || error instanceof RangeError) return false;
  if (isReply(error)) return UNAVAILABLE.has(String(error.message).split(" ", 1)[0]);
  return error instanceof Error;
}

/** Whether a client lost its server and would queue a command until it reconnects
 * (ioredis' offline queue; node-redis while it reconnects). A client still making its first
 * connection sends once connected, within the timeout. */
function notReady(client) {
  if (typeof client.status === "string") return ["reconnecting", "end", "close"].includes(client.status);
  if (typeof client.isReady === "boolean" && typeof client.isOpen === "boolean")
    return client.isOpen && !client.isReady;
  return false;
}

class Circuit {
  constructor({ onError = "throw", cooldown = 1000, clock = Date.now, logger = console } = {}) {
    if (!ON_ERROR.includes(onError)) {
      throw new RangeError(`onError is one of ${ON_ERROR.join(", ")}, not ${JSON.stringify(onError)}`);
    }
    this.onError = onError;
    this.cooldown = cooldown;
    this.clock = clock;
    this.logger = logger;
    this.openUntil = -Infinity;
    // Half-open: a probe is out until then.
    this.probeUntil = -Infinity;
    this.loggedAt = -Infinity;
    this.lastError = null;
  }

  /**
   * Whether this call decides without asking: within a cool-down after a failure, or while
   * another call probes the server. A call told false asks (after a failure, it is the
   * probe); a probe that never reports back stops counting after a cool-down.
   */
  open() {
    if (this.openUntil === -Infinity) return false;
    const now = this.clock();
    if (now < this.openUntil || now < this.probeUntil) return true;
    this.probeUntil = now + this.cooldown;
    return false;
  }

  /** The server answered: the circuit closes. */
  succeeded() {
    this.openUntil = this.probeUntil = -Infinity;
  }

  /** Seconds until the server is asked again (or the probe out has its answer). */
  retryAfter() {
    return Math.max(0, this.openUntil - this.clock(), this.probeUntil - this.clock()) / 1000;
  }

  /** Notes a failure: opens for a cool-down, logs at most once a second. */
  failed(error) {
    const now = this.clock();
    this.openUntil = now + this.cooldown;
    this.lastError = error;
    if (now - this.loggedAt >= 1000) {
      this.loggedAt = now;
      this.logger.error(
        `rate limiter: the server failed (${error.message}); deciding "${this.onError}" for ${this.cooldown} ms`,
      );
    }
  }

  /** The error a call that was not made throws. */
  unavailable() {
    return new ServerUnavailable(
      `the server failed less than ${this.cooldown} ms ago: ${this.lastError && this.lastError.message}`,
      { cause: this.lastError, retryAfter: this.retryAfter() },
    );
  }
}

/**
 * Sends `args` through `send` within `timeout` ms, or throws ServerUnavailable: at once while
 * the circuit is open or the client would queue the command, after `timeout` if the server
 * does not answer, and on a reply that says it cannot serve. Other errors (a bad call) are
 * thrown as they are.
 */
function guardedSender(client, send, circuit, timeout) {
  return async (args) => {
    if (circuit.open()) throw unavailable(circuit, circuit.unavailable());
    if (notReady(client)) return fail(circuit, new Error("the client is not connected"));
    let timer;
    const expired = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new CallTimedOut(timeout)), timeout);
    });
    try {
      const reply = await waitingOnServer(() => Promise.race([send(args), expired]));
      circuit.succeeded();
      return reply;
    } catch (error) {
      if (error instanceof ServerUnavailable) throw error;
      if (serverFailed(error)) return fail(circuit, error);
      circuit.succeeded(); // the server answered: the call was wrong
      throw error;
    } finally {
      clearTimeout(timer);
    }
  };
}

function fail(circuit, error) {
  circuit.failed(error);
  throw unavailable(
    circuit,
    new ServerUnavailable(`the server failed: ${error.message}`, { cause: error, retryAfter: circuit.retryAfter() }),
  );
}

/** `error`, the call's ServerUnavailable: unless the policy admits ("allow"), what the request
 * is answered (an error, a 503) is the package's own, not the service's (answered.js). */
function unavailable(circuit, error) {
  if (circuit.onError !== "allow") markOwn();
  return error;
}

/**
 * Refusals answered locally while they stand: at most `maxKeys`, the least recently used
 * out. It only ever refuses what the server refused, never for longer than it said.
 */
class DenyCache {
  constructor(maxKeys, clock = Date.now) {
    if (!(maxKeys >= 1)) throw new RangeError("denyCache holds at least one key");
    this.maxKeys = maxKeys;
    this.clock = clock;
    this.entries = new Map(); // key -> { until, quantity, result, cachedAt }
  }

  /** The standing refusal for `key` if `quantity` is not smaller, aged by the time passed. */
  get(key, quantity) {
    const entry = this.entries.get(key);
    if (!entry) return null;
    const now = this.clock();
    if (now >= entry.until) {
      this.entries.delete(key);
      return null;
    }
    if (quantity < entry.quantity) return null;
    this.entries.delete(key);
    this.entries.set(key, entry);
    const elapsed = (now - entry.cachedAt) / 1000;
    const aged = (one) => ({
      ...one,
      retryAfter: one.retryAfter === null ? null : Math.max(0, one.retryAfter - elapsed),
      resetAfter: Math.max(0, one.resetAfter - elapsed),
    });
    return { ...aged(entry.result), retryAfter: (entry.until - now) / 1000, each: entry.result.each.map(aged) };
  }

  /** Caches `result` if it is a refusal with a retryAfter. */
  put(key, quantity, result) {
    if (result.allowed || result.retryAfter === null || !(result.retryAfter > 0)) return;
    const now = this.clock();
    this.entries.delete(key);
    this.entries.set(key, { until: now + result.retryAfter * 1000, quantity, result, cachedAt: now });
    while (this.entries.size > this.maxKeys) this.entries.delete(this.entries.keys().next().value);
  }
}

module.exports = { CallTimedOut, Circuit, DenyCache, ServerUnavailable, guardedSender, serverFailed, ON_ERROR };
