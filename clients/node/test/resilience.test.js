// The deny cache and the circuit against brute-force models, on random histories with an
// injected clock (no server): the cache never admits, and never refuses longer than the
// server said.
"use strict";

const assert = require("node:assert/strict");
const { test } = require("node:test");
const { ErrorReply, SimpleError } = require("@redis/client/dist/lib/errors");
const { ReplyError } = require("redis-errors");
const { CallTimedOut, Circuit, DenyCache, serverFailed } = require("../resilience");

/** A small seeded generator (mulberry32), so that a failing seed can be replayed. */
function random(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pick = (rng, items) => items[Math.floor(rng() * items.length)];
const refusal = (retryAfter) => ({
  allowed: false,
  limit: 5,
  remaining: 0,
  retryAfter,
  resetAfter: retryAfter + 1,
  each: [],
});

test("the deny cache only refuses what the server refused, and never longer", () => {
  for (let seed = 0; seed < 200; seed++) {
    const rng = random(seed);
    let now = 0;
    const cache = new DenyCache(1 + Math.floor(rng() * 4), () => now);
    const refusals = []; // the model: [key, quantity, until ms]
    for (let step = 0; step < 100; step++) {
      now += pick(rng, [0, 10, 300, 1000]);
      const key = pick(rng, ["a", "b", "c", "d", "e"]);
      const quantity = 1 + Math.floor(rng() * 4);
      const answer = cache.get(key, quantity);
      if (answer) {
        assert.equal(answer.allowed, false);
        const standing = refusals.filter(([k, q, until]) => k === key && q <= quantity && until > now);
        assert.ok(standing.length > 0, `seed ${seed}: refused without the server`);
        assert.ok(
          standing.some(([, , until]) => Math.abs(now + answer.retryAfter * 1000 - until) < 1e-6),
          `seed ${seed}`,
        );
        continue;
      }
      if (rng() < 0.5) {
        const retryAfter = pick(rng, [0.2, 0.5, 2]);
        refusals.push([key, quantity, now + retryAfter * 1000]);
        cache.put(key, quantity, refusal(retryAfter));
      } else {
        cache.put(key, quantity, { allowed: true, limit: 5, remaining: 3, retryAfter: null, resetAfter: 1, each: [] });
      }
      assert.ok(cache.entries.size <= cache.maxKeys);
    }
  }
});

test("the least recently used refusal goes first", () => {
  let now = 0;
  const cache = new DenyCache(2, () => now);
  cache.put("a", 1, refusal(10));
  cache.put("b", 1, refusal(10));
  assert.ok(cache.get("a", 1));
  cache.put("c", 1, refusal(10));
  assert.equal(cache.get("b", 1), null);
  assert.equal(cache.get("a", 3).retryAfter, 10);
  assert.equal(cache.get("c", 0), null, "a smaller quantity may fit");
  now = 4000;
  assert.equal(cache.get("c", 1).retryAfter, 6);
  now = 10000;
  assert.equal(cache.get("c", 1), null);
});

test("a failure opens the circuit for the cool-down", () => {
  let now = 0;
  const logged = [];
  const circuit = new Circuit({
    onError: "deny",
    cooldown: 2000,
    clock: () => now,
    logger: { error: (line) => logged.push(line) },
  });
  assert.equal(circuit.open(), false);
  circuit.failed(new Error("gone"));
  circuit.failed(new Error("gone"));
  assert.equal(logged.length, 1, "logged at most once a second");
  assert.equal(circuit.retryAfter(), 2);
  now = 1500;
  assert.equal(circuit.open(), true);
  now = 2000;
  assert.equal(circuit.open(), false);
  assert.throws(() => new Circuit({ onError: "ignore" }), RangeError);
});

test("after the cool-down one call probes; the others keep the policy until it answers", () => {
  let now = 0;
  const circuit = new Circuit({ onError: "deny", cooldown: 1000, clock: () => now, logger: { error() {} } });
  circuit.failed(new Error("gone"));
  now = 1000;
  assert.equal(circuit.open(), false, "the probe asks");
  assert.deepEqual([circuit.open(), circuit.open()], [true, true], "the others do not");
  assert.equal(circuit.retryAfter(), 1);
  // The probe fails: open for another cool-down, then one probe again.
  now = 1200;
  circuit.failed(new Error("still gone"));
  now = 2100;
  assert.equal(circuit.open(), true);
  now = 2200;
  assert.deepEqual([circuit.open(), circuit.open()], [false, true]);
  // It answers: closed, every call asks.
  circuit.succeeded();
  assert.deepEqual([circuit.open(), circuit.open()], [false, false]);
  // A probe that never reports back stops counting after a cool-down.
  circuit.failed(new Error("gone"));
  now = 3200;
  assert.deepEqual([circuit.open(), circuit.open()], [false, true]);
  now = 4200;
  assert.equal(circuit.open(), false);
});

test("failures are told from bad calls by type, not by text", () => {
  // Replies: a failure only when their code says the server cannot serve now.
  assert.equal(serverFailed(new ReplyError("LOADING Redis is loading the dataset in memory")), true);
  assert.equal(serverFailed(new SimpleError("READONLY You can't write against a read only replica.")), true);
  assert.equal(serverFailed(new ErrorReply("CLUSTERDOWN The cluster is down")), true);
  assert.equal(serverFailed(new ReplyError("ERR limit must be at least 1 (ECONNREFUSED)")), false);
  assert.equal(serverFailed(new SimpleError("WRONGTYPE Operation against a key")), false);
  // Anything else the client rejects with is the connection's: whatever its text.
  assert.equal(serverFailed(new CallTimedOut(1000)), true);
  assert.equal(serverFailed(Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" })), true);
  assert.equal(serverFailed(new Error("Reached the max retries per request limit (which is 0).")), true);
  // A bad argument is the caller's.
  assert.equal(serverFailed(new TypeError("Invalid argument type")), false);
  assert.equal(serverFailed(new RangeError("quantity")), false);
});
