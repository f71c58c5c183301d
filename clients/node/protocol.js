// What every client of the Node package sends and reads, with no I/O: each limiter's and
// option's words, each reply read into a typed result, the leases', counts', RL.TOP's and the
// shared lists' commands and replies. clients/conformance.json pins all of it (the same table
// the Python, Rust and Lua packages are tested against): adding a command is one entry per
// case there and one function here.
//
// Times are asked of the module in milliseconds and given in seconds.
"use strict";

const millis = (seconds) => Math.max(1, Math.round(seconds * 1000));

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

/** RL.LOAD.REPORT: an instance's factors, counting for `ttl` seconds. */
function reportCommand(key, instance, ttl, factors) {
  const words = ["RL.LOAD.REPORT", key, instance, Math.max(1, Math.round(ttl * 1000))];
  for (const [name, value] of Object.entries(factors)) {
    // Finite and not negative, as the module takes it; six significant digits.
    const number = Number.isFinite(value) ? Math.min(Math.max(value, 0), 1e15) : 0;
    words.push(name, String(Number(number.toPrecision(6))));
  }
  return words;
}

/** The standing a report answers: `[level, instances, share x 4]`. */
function reportResult(reply) {
  return { level: Number(reply[0]), instances: Number(reply[1]), shares: reply.slice(2, 6).map(Number) };
}

module.exports = {
  millis,
  reportCommand,
  reportResult,
  throttle,
  window,
  log,
  load,
  slots,
  rateLimiters,
  fromReply,
  optionWords,
  commandFor,
  resultOf,
  countsCommand,
  countsOf,
  topKeys,
  leaseCommand,
  releaseCommand,
  renewCommand,
  leaseOf,
  addCommands,
  removeCommands,
  parseLists,
  hashOf,
};
