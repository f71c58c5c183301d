// Load shedding against a live server: the shedder reports its own signals and sheds by the
// level the server answers, per priority, in shadow mode too, with its metrics; a level nobody
// reports any more sheds nothing; a load gate in a check sheds with nothing charged; the
// process's own limit sheds by priority once a queue stands, with the server answering or
// frozen, and the defaults shed nothing from a healthy service; and in Express and NestJS over
// real HTTP, a shed request gets 503 with Retry-After.
"use strict";

require("reflect-metadata");
const assert = require("node:assert/strict");
const { randomUUID } = require("node:crypto");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { after, test } = require("node:test");
const express = require("express");
const { Registry } = require("prom-client");
const { RateLimiter, load, throttle } = require("../index");
const {
  ConcurrencyLimit,
  CpuMeter,
  LoadShedder,
  PRIORITIES,
  ROUTES_KEPT,
  Signals,
  loadShedding,
  memoryShare,
  shedRequests,
  reportCommand,
  reportResult,
} = require("../load");
const { PrometheusMetrics } = require("../metrics");
const { ioredis, listen } = require("./helpers");

const redis = ioredis();
after(() => redis.disconnect());

// At cpu 0.5: every sheddable_plus and sheddable request shed; at 0.9, half the critical.
const POLICY = [
  "HOLD",
  "0",
  "LEVEL",
  "cpu",
  "0.5",
  "SHARES",
  "1",
  "1",
  "0",
  "0",
  "LEVEL",
  "cpu",
  "0.9",
  "SHARES",
  "1",
  "0.5",
  "0",
  "0",
];

async function service() {
  const key = `node:load:${randomUUID()}`;
  await redis.call("RL.LOAD.POLICY", key, ...POLICY);
  return key;
}

/** Signals whose CPU is `cpu` and memory 0.1, whatever the machine does. */
const signals = (cpu) => new Signals({ cpu: () => cpu, memory: () => 0.1, load: () => 0.5 });

const quiet = { warn() {}, info() {} };

test("a report is one command and its reply the standing", () => {
  assert.deepEqual(reportCommand("svc", "web-1", 3, { cpu: 0.25, inflight: 3, odd: -1 }), [
    "RL.LOAD.REPORT",
    "svc",
    "web-1",
    3000,
    "cpu",
    "0.25",
    "inflight",
    "3",
    "odd",
    "0",
  ]);
  assert.deepEqual(reportResult([2, 3, "1", "1", "0.5", "0"]), { level: 2, instances: 3, shares: [1, 1, 0.5, 0] });
});

test("the application's own factors join the report", async () => {
  const key = `node:load:${randomUUID()}`;
  await redis.call(
    "RL.LOAD.POLICY",
    key,
    "HOLD",
    "0",
    "FACTOR",
    "backlog",
    "SUM",
    "LEVEL",
    "backlog",
    "100",
    "SHARES",
    "1",
    "1",
    "0",
    "0",
  );
  let backlog = 60;
  const [a, b] = ["a", "b"].map(
    (instance) =>
      new LoadShedder(redis, key, { instance, signals: signals(0.1), factors: () => ({ backlog }), logger: quiet }),
  );
  assert.equal((await a.report()).level, 0, "60 waiting");
  assert.equal((await b.report()).level, 1, "120 waiting over the fleet");
  // A callback that fails costs its factors, never the report.
  backlog = "not a number";
  assert.equal((await b.report()).level, 0, "b's backlog left out: 60 waiting");
});

test("it sheds by priority the level its report answers, with metrics", async () => {
  const key = await service();
  const register = new Registry();
  const metrics = new PrometheusMetrics({ register });
  const shedder = new LoadShedder(redis, key, { instance: "a", signals: signals(0.8), metrics, logger: quiet });
  assert.equal(shedder.standing.level, 0, "before any report");
  const standing = await shedder.report();
  assert.deepEqual(standing, { level: 1, instances: 1, shares: [1, 1, 0, 0] });
  assert.ok(shedder.admit("critical_plus"));
  assert.ok(shedder.admit("Critical"));
  assert.ok(!shedder.admit("sheddable_plus"));
  assert.ok(!shedder.admit(undefined), "no priority: sheddable");
  // Every instance reporting to the key counts: two more at 1.0 make the mean 0.93.
  await new LoadShedder(redis, key, { instance: "b", signals: signals(1) }).report();
  await new LoadShedder(redis, key, { instance: "c", signals: signals(1) }).report();
  assert.equal((await shedder.report()).level, 2);
  const draws = [0.75, 0.25];
  shedder.random = () => draws.shift();
  assert.ok(!shedder.admit("critical"), "a draw of 0.75 against a share of 0.5");
  assert.ok(shedder.admit("critical"), "a draw of 0.25");
  const text = await register.metrics();
  assert.match(text, new RegExp(`ratelimit_load_level\\{service="${key}"\\} 2`));
  assert.match(text, /ratelimit_load_decisions_total\{service="[^"]+",priority="sheddable",outcome="shed"\} 1/);
});

test("in shadow mode nothing is shed and what would be is counted", async () => {
  const key = await service();
  const register = new Registry();
  const metrics = new PrometheusMetrics({ register });
  const shedder = new LoadShedder(redis, key, { signals: signals(0.7), shadow: true, metrics, logger: quiet });
  await shedder.report();
  assert.ok(shedder.admit("sheddable"));
  assert.match(await register.metrics(), /priority="sheddable",outcome="shadow"\} 1/);
});

test("a level nobody reports any more sheds nothing", async () => {
  const key = await service();
  let now = 0;
  const shedder = new LoadShedder(redis, key, { signals: signals(0.95), interval: 1, clock: () => now, logger: quiet });
  await shedder.report();
  assert.equal(shedder.standing.level, 2);
  shedder.send = () => Promise.reject(new Error("down"));
  assert.equal(await shedder.report(), null);
  now = 2.9;
  assert.equal(shedder.standing.level, 2, "the level holds for the report's ttl");
  now = 3.1;
  assert.equal(shedder.standing.level, 0);
  assert.ok(shedder.admit("sheddable"));
});

test("the signals count requests: latency, errors and the window's counts", () => {
  let now = 0;
  const counted = new Signals({ clock: () => now, cpu: () => null, memory: () => null, load: () => 0.25 });
  counted.started();
  counted.started();
  assert.equal(counted.sample().inflight, 2);
  now = 10.2;
  counted.done(0.02, 200);
  counted.done(0.06, 503);
  now = 11.5;
  counted.started();
  counted.done(0.01, 200);
  const sample = counted.sample();
  assert.equal(sample.inflight, 0);
  assert.equal(sample.load, 0.25);
  assert.ok(Math.abs(sample.latency - 30) < 1e-9);
  assert.ok(Math.abs(sample.errors - 1 / 3) < 1e-9);
  assert.deepEqual([sample.requests, sample.successes], [3, 2]);
  // No second was busy: the throughput measured the demand, not the capacity.
  assert.deepEqual([sample.max_rps, sample.min_rt], [undefined, undefined]);
  // A busy second (the process's limit congested) counts.
  now = 12.3;
  counted.started();
  counted.started();
  counted.done(0.04, 200, true);
  counted.done(0.03, 200, true);
  const busy = counted.sample();
  assert.deepEqual([busy.max_rps, busy.min_rt], [2, 30]);
});

test("min_rt is the no-load latency of the mix, not of its fastest route", () => {
  // A health check of 1 ms polled beside work of 30 ms or more: the pipe is what the work holds.
  // The least latency of all would read it as a thirtieth of that, and a service at its capacity
  // as thirty times over it (bbr).
  let now = 3.5;
  const counted = new Signals({ clock: () => now, cpu: () => null, memory: () => null, load: () => 0 });
  counted.done(0.001, 200, true, "GET /health");
  for (const latency of [0.04, 0.03, 0.05]) counted.done(latency, 200, true, "GET /work");
  now = 4.5;
  counted.done(0.035, 200, true, "GET /work");
  const sample = counted.sample();
  assert.equal(sample.max_rps, 4);
  // The work's least (30 ms) for its four requests, the check's (1 ms) for its one.
  assert.ok(Math.abs(sample.min_rt - (4 * 30 + 1) / 5) < 1e-9, String(sample.min_rt));
  // A second not busy counts for neither.
  now = 5.5;
  counted.done(0.0005, 200, false, "GET /health");
  assert.ok(Math.abs(counted.sample().min_rt - (4 * 30 + 1) / 5) < 1e-9);
});

test("the shedder tells the signals each request's route", () => {
  let now = 7.5;
  const clock = () => now;
  const shedder = new LoadShedder(redis, `node:routes:${randomUUID()}`, {
    clock,
    signals: new Signals({ clock, cpu: () => null, memory: () => null, load: () => 0 }),
    logger: quiet,
  });
  shedder.limit.congested = true; // busy seconds: what min_rt reads
  for (const [route, latency] of [
    ["GET /health", 0.001],
    ["GET /work", 0.03],
  ]) {
    const ticket = shedder.admit("critical_plus");
    now += latency;
    shedder.finished(ticket, 200, false, route);
  }
  // Each route's least latency, weighted by its one request (unnamed, the least: 1 ms).
  assert.ok(Math.abs(shedder.signals.sample().min_rt - (1 + 30) / 2) < 1e-6);
});

test("a second keeps so many routes apart, and the rest together", () => {
  const counted = new Signals({ clock: () => 1.5, cpu: () => null, memory: () => null, load: () => 0 });
  for (let route = 0; route < ROUTES_KEPT; route += 1) counted.done(0.01, 200, true, `GET /${route}`);
  // Past them, two routes share an entry: the least of the two for both requests.
  counted.done(0.02, 200, true, "GET /late");
  counted.done(0.06, 200, true, "GET /later");
  const expected = (ROUTES_KEPT * 10 + 2 * 20) / (ROUTES_KEPT + 2);
  assert.ok(Math.abs(counted.sample().min_rt - expected) < 1e-9);
});

test("the package's own answer leaves the local limit unmeasured", () => {
  let now = 0;
  const shedder = new LoadShedder(redis, `node:own:${randomUUID()}`, { clock: () => now, logger: quiet });
  // A request the package answered after a failing server's 1 s timeout: it leaves the requests in
  // flight, and its second is no latency of the service's.
  let ticket = shedder.admit("critical");
  assert.equal(shedder.limit.inflight, 1);
  now += 1;
  shedder.finished(ticket, 503, true);
  assert.equal(shedder.limit.inflight, 0);
  assert.equal(shedder.limit.noload, Infinity);
  // The service's own answer is its latency.
  ticket = shedder.admit("critical");
  now += 0.002;
  shedder.finished(ticket, 200);
  assert.equal(shedder.limit.noload, 2000);
});

test("a limit's refusal and the package's own answers say nothing of the service", async () => {
  const shedder = new LoadShedder(redis, `node:own:${randomUUID()}`, { limit: false, logger: quiet });
  shedder.signals = new Signals({ cpu: () => null, memory: () => null });
  // A 429 (whoever made it), and a 503 or 500 the package made by its policy: each leaves the
  // requests in flight, and nothing else counts it.
  for (const [status, own] of [
    [429, false],
    [503, true],
    [500, true],
  ])
    shedder.finished(shedder.admit("critical"), status, own);
  // The service's own 503 and 200 count.
  shedder.finished(shedder.admit("critical"), 503);
  shedder.finished(shedder.admit("critical"), 200);
  const sample = shedder.signals.sample();
  assert.equal(sample.inflight, 0);
  assert.deepEqual([sample.requests, sample.successes, sample.errors], [2, 1, 0.5]);
  // The failure policy marks the request it answers: under "deny" and "throw", not "allow".
  const { watching } = require("../answered");
  const marks = [];
  for (const onError of ["deny", "throw", "allow"]) {
    const limiter = new RateLimiter(redis, { onError, timeout: 1000, logger: { error() {} } });
    limiter.circuit.failed(new Error("frozen"));
    let pending;
    const request = watching(() => {
      pending = limiter.check([throttle("k", 1, 1, 1)]).catch(() => null);
    });
    await pending;
    marks.push(request.own);
  }
  assert.deepEqual(marks, [true, true, false]);
});

test("Express: a request waiting on the rate-limit server is not in flight", async () => {
  const net = require("node:net");
  let received;
  const sent = new Promise((resolve) => (received = resolve));
  const silent = net.createServer((socket) => socket.on("data", received));
  await new Promise((resolve) => silent.listen(0, "127.0.0.1", resolve));
  const Redis = require("ioredis");
  const frozen = new Redis({ port: silent.address().port, maxRetriesPerRequest: null, enableReadyCheck: false });
  frozen.on("error", () => {});
  const shedder = new LoadShedder(redis, `node:waits:${randomUUID()}`, { interval: 3600, logger: quiet });
  const seen = [];
  const app = express();
  app.use(loadShedding(shedder));
  for (const [path, client] of [
    ["/healthy", redis],
    ["/frozen", frozen],
  ]) {
    const limiter = new RateLimiter(client, { onError: "allow", timeout: 2000, logger: { error() {} } });
    app.get(path, async (req, res) => {
      await limiter.check([throttle(`node:waits:${randomUUID()}`, 10, 10, 1)]);
      // The server answered (or the wait gave up): in flight again.
      seen.push(shedder.limit.inflight);
      res.send("ok");
    });
  }
  const server = app.listen(0, "127.0.0.1");
  await new Promise((resolve) => server.once("listening", resolve));
  const base = `http://127.0.0.1:${server.address().port}`;
  try {
    assert.equal((await fetch(`${base}/healthy`, { headers: { "x-priority": "critical" } })).status, 200);
    assert.deepEqual(seen, [1]);
    // A frozen server: while the request waits its timeout, it is not in flight.
    const answer = fetch(`${base}/frozen`, { headers: { "x-priority": "critical" } });
    await sent;
    assert.equal(shedder.limit.inflight, 0, "waiting on the server");
    assert.equal((await answer).status, 200);
    assert.deepEqual(seen, [1, 1]);
    assert.equal(shedder.limit.inflight, 0);
  } finally {
    server.close();
    frozen.disconnect();
    silent.close();
  }
});

/** A no-load latency of 5 ms, then a queue that stands: 20 requests in flight, and every one of
 * the next interval taking 100 ms (over four times the target of 10 ms). */
function flood(shedder, clock) {
  let ticket = shedder.admit("critical");
  clock.now += 0.005;
  shedder.finished(ticket, 200);
  const tickets = Array.from({ length: 20 }, () => shedder.admit("critical"));
  assert.ok(tickets.every(Boolean), "under the limit of 20, everything goes");
  clock.now += 0.1;
  for (ticket of tickets.slice(0, 10)) shedder.finished(ticket, 200);
  clock.now += 0.1;
  shedder.finished(tickets[10], 200);
}

test("defaults shed nothing from a healthy service", async () => {
  // The documented setup, every option at its default, the default policy: the process's real
  // signals reported, requests of every class through it.
  const shedder = new LoadShedder(redis, `node:healthy:${randomUUID()}`, { logger: quiet });
  assert.notEqual(await shedder.report(), null);
  let refused = 0;
  for (let number = 0; number < 400; number++) {
    const ticket = shedder.admit(PRIORITIES[number % 4]);
    if (ticket === null) refused += 1;
    else shedder.finished(ticket, 200);
    if (number % 100 === 0) assert.equal((await shedder.report()).level, 0);
  }
  assert.equal(refused, 0);
  assert.equal(shedder.limit.congested, false);
});

test("the accept queue's probe waits behind a busy loop, and stops where another process takes it", async () => {
  const net = require("node:net");
  const { AcceptProbe, probeTarget } = require("../accept");
  const clock = () => performance.now() / 1000;
  const listening = (server) => new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
  const server = await listening(net.createServer());
  const other = await listening(net.createServer());
  try {
    assert.equal(probeTarget(net.createServer()), null, "a server not listening");
    assert.deepEqual(probeTarget(server), { host: "127.0.0.1", port: server.address().port });
    const probe = AcceptProbe.of(server, clock);
    probe.send();
    // The loop blocked: the probe waits in the accept queue, and its age says so meanwhile.
    const blockedUntil = performance.now() + 100;
    while (performance.now() < blockedUntil);
    assert.ok(probe.wait(clock()) >= 0.1, "in flight, at least its age");
    for (let turn = 0; turn < 200 && probe.pending !== null; turn++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.equal(probe.pending, null, "the server took it");
    assert.ok(probe.last >= 0.1, `it waited the blocked loop out (${probe.last} s)`);
    probe.idle(clock());
    assert.equal(probe.wait(clock()), 0, "an idle loop had nothing queued");
    probe.stop();
    // A probe another server takes is never seen here: once the loop idled after it, probing
    // stops, and the time since idle alone bounds a request's wait.
    const lost = new AcceptProbe(server, probeTarget(other), clock);
    lost.send();
    await new Promise((resolve) => setTimeout(resolve, 50));
    lost.idle(clock());
    assert.equal(lost.wait(clock()), null);
    lost.stop();
  } finally {
    server.close();
    other.close();
  }
});

test("a closed loop of two clients keeps the loop busy, and nothing of it is shed", async () => {
  // Node takes one connection a turn and leaves the rest in the kernel's accept queue: two clients
  // that each connect again as they are answered keep the loop from ever idling, with no more than
  // one request waiting. The time since the loop was last idle reads that as a queue as old as the
  // loop has been busy; the probe connection the shedder times in the accept queue waits one turn.
  const { fork } = require("node:child_process");
  const http = require("node:http");
  const env = { ...process.env, SERVICE: `node:busy:${randomUUID()}` };
  const child = fork(path.join(__dirname, "apps", "busy.js"), [], { env });
  try {
    const port = await new Promise((resolve, reject) => {
      child.once("message", (message) => resolve(message.port));
      child.once("exit", (code) => reject(new Error(`the service exited (${code})`)));
    });
    const get = (url, headers = {}) =>
      new Promise((resolve, reject) => {
        http
          .get({ host: "127.0.0.1", port, path: url, agent: false, headers }, (res) => {
            let body = "";
            res.on("data", (chunk) => (body += chunk));
            res.on("end", () => resolve({ status: res.statusCode, body }));
          })
          .on("error", reject);
      });
    // 400 requests of 4 ms each: 1.6 s of a busy loop, twice the eight intervals a standing queue
    // needs to begin congestion.
    const statuses = [];
    const client = async () => {
      while (statuses.length < 400) statuses.push((await get("/")).status);
    };
    await Promise.all([client(), client()]);
    const stats = JSON.parse((await get("/stats", { "x-priority": "critical_plus" })).body);
    assert.deepEqual(
      statuses.filter((status) => status !== 200),
      [],
      `nothing shed (congestions: ${stats.congestions})`,
    );
    assert.equal(stats.probing, true, "the probe ran");
  } finally {
    child.kill();
  }
});

test("a standing queue sheds the least important first, by the process's own limit", () => {
  const clock = { now: 0 };
  // The limit of every package's defaults (the shedder's own waits four standing intervals
  // before congestion, however deep: see load.js).
  const limit = new ConcurrencyLimit();
  const shedder = new LoadShedder(redis, `node:flood:${randomUUID()}`, {
    clock: () => clock.now,
    limit,
    logger: quiet,
  });
  assert.equal(new LoadShedder(redis, "node:default", { logger: quiet }).limit.options.deep, Infinity);
  flood(shedder, clock);
  assert.equal(shedder.limit.congested, true);
  // Cut to the peak times target / fastest, at least 0.2: 20 * 0.2 = 4; 9 in flight.
  assert.deepEqual([shedder.limit.limit, shedder.limit.inflight], [4, 9]);
  for (const priority of PRIORITIES) assert.equal(shedder.admit(priority), null, priority);
  const own = new LoadShedder(redis, "node:own", { limit: new ConcurrencyLimit({ initial: 2 }), logger: quiet });
  assert.ok(own.admit("sheddable") && own.admit("sheddable"));
  assert.equal(own.admit("critical_plus"), null, "two in flight of two");
  const none = new LoadShedder(redis, "node:none", { limit: false, logger: quiet });
  assert.equal(none.limit, null);
  assert.ok(Array.from({ length: 100 }, () => none.admit("sheddable")).every(Boolean));
});

test("what the level sheds holds the process's limit congested", async () => {
  const clock = { now: 0 };
  const shedder = new LoadShedder(redis, await service(), {
    clock: () => clock.now,
    signals: signals(0.8),
    limit: new ConcurrencyLimit(),
    logger: quiet,
  });
  flood(shedder, clock);
  assert.equal(shedder.limit.congested, true);
  while (shedder.limit.inflight) shedder.limit.finish(5000, Math.round(clock.now * 1e6));
  assert.deepEqual((await shedder.report()).shares, [1, 1, 0, 0]);
  // An interval in which the level refuses ten requests and leaves the limit one, fast, under
  // half the limit: the overload goes on, and congestion holds.
  clock.now += 0.1;
  const ticket = shedder.admit("critical");
  clock.now += 0.005;
  shedder.finished(ticket, 200);
  for (let number = 0; number < 10; number++) assert.equal(shedder.admit("sheddable"), null);
  clock.now += 0.1;
  assert.notEqual(shedder.admit("critical_plus"), null);
  assert.equal(shedder.limit.congested, true, "ten refused by the level, one admitted");
  // Intervals the level refuses nothing of: congestion ends at the fourth in a row.
  for (let calm = 0; calm < 4; calm++) {
    assert.equal(shedder.limit.congested, true, `${calm} calm intervals in a row`);
    shedder.finished(shedder.admit("critical_plus"), 200);
    clock.now += 0.1;
  }
  shedder.admit("critical_plus");
  assert.equal(shedder.limit.congested, false, "nothing refused, under half the limit");
});

test("with the server frozen, the process's own limit still protects", async () => {
  const net = require("node:net");
  const silent = net.createServer(() => {});
  await new Promise((resolve) => silent.listen(0, "127.0.0.1", resolve));
  const Redis = require("ioredis");
  const frozen = new Redis({ port: silent.address().port, maxRetriesPerRequest: null, enableReadyCheck: false });
  frozen.on("error", () => {});
  try {
    const clock = { now: 0 };
    const shedder = new LoadShedder(frozen, "node:frozen", {
      clock: () => clock.now,
      timeout: 200,
      limit: new ConcurrencyLimit(),
      logger: quiet,
    });
    assert.equal(await shedder.report(), null, "no answer within the deadline");
    assert.equal(shedder.standing.level, 0, "no level: nothing shed by one");
    flood(shedder, clock);
    assert.equal(shedder.admit("sheddable"), null, "shed by the process's own limit");
    // The queue drains; calm intervals under half the limit end congestion at the fourth in a
    // row.
    const limit = shedder.limit;
    while (limit.inflight) limit.finish(5000, Math.round(clock.now * 1e6));
    clock.now += 0.2;
    const ticket = shedder.admit("critical_plus");
    assert.notEqual(ticket, null, "the limit grows by one an interval while congested");
    clock.now += 0.005;
    shedder.finished(ticket, 200);
    for (let calm = 1; calm < 4; calm++) {
      clock.now += 0.1;
      assert.equal(limit.congested, true, `${calm} calm intervals in a row`);
      shedder.finished(shedder.admit("critical_plus"), 200);
    }
    clock.now += 0.1;
    assert.notEqual(shedder.admit("sheddable"), null);
    assert.equal(limit.congested, false);
  } finally {
    frozen.disconnect();
    silent.close();
  }
});

test("cpu is the share of what the instance may use; memory of what is allowed", () => {
  let now = 0;
  let used = 10;
  const empty = fs.mkdtempSync(path.join(os.tmpdir(), "cgroup-"));
  // No quota: the process's CPU over one core, capped at 1.
  const own = new CpuMeter({ cgroup: empty, clock: () => now, processSeconds: () => used });
  assert.equal(own.read(), null, "the first reading has nothing to compare");
  [now, used] = [2, 11.5];
  assert.ok(Math.abs(own.read() - 0.75) < 1e-9);
  [now, used] = [3, 13.5];
  assert.equal(own.read(), 1, "two cores' worth in a second: capped");
  // A quota of two cores: the cgroup's use over the quota, whatever the process uses.
  const cgroup = fs.mkdtempSync(path.join(os.tmpdir(), "cgroup-"));
  const write = (name, text) => fs.writeFileSync(path.join(cgroup, name), text);
  write("cpu.max", "200000 100000\n");
  write("cpu.stat", "usage_usec 5000000\nuser_usec 1\n");
  const container = new CpuMeter({ cgroup, clock: () => now, processSeconds: () => 0 });
  assert.equal(container.read(), null);
  now += 2;
  write("cpu.stat", "usage_usec 8000000\nuser_usec 1\n");
  assert.ok(Math.abs(container.read() - 0.75) < 1e-9);
  write("cpu.max", "max 100000\n");
  assert.equal(container.read(), null, "the quota lifted: a new baseline");
  write("memory.current", "268435456\n");
  write("memory.max", "1073741824\n");
  assert.equal(memoryShare({ cgroup }), 0.25);
  write("memory.max", "max\n");
  write("meminfo", "MemTotal:       1000 kB\nMemFree:  10 kB\nMemAvailable:    400 kB\n");
  assert.equal(memoryShare({ cgroup, meminfo: path.join(cgroup, "meminfo") }), 0.6);
  fs.rmSync(empty, { recursive: true });
  fs.rmSync(cgroup, { recursive: true });
});

test("a load gate in a check sheds with nothing charged", async () => {
  const tag = randomUUID();
  const gate = `{${tag}}:gate`;
  await redis.call("RL.LOAD.POLICY", gate, ...POLICY);
  await redis.call("RL.LOAD.REPORT", gate, "a", 60000, "cpu", "0.6");
  const limiter = new RateLimiter(redis);
  const user = throttle(`{${tag}}:user`, 4, 1, 60);
  const admitted = await limiter.check([load(gate, "critical"), user]);
  assert.equal(admitted.allowed, true);
  assert.deepEqual([admitted.shedLevel, admitted.remaining], [0, 4]);
  const shed = await limiter.check([load(gate, "sheddable"), user]);
  assert.equal(shed.allowed, false);
  assert.deepEqual([shed.shedLevel, shed.remaining, shed.each.length], [1, 4, 1]);
});

/** Requests to `base` with X-Priority `priority`: the status and Retry-After. */
async function get(base, priority) {
  const response = await fetch(`${base}/`, { headers: { "X-Priority": priority } });
  await response.text();
  return { status: response.status, retryAfter: response.headers.get("retry-after") };
}

/** Up to a thousand turns of the event loop, until `condition()` holds (a response's "finish"
 * may follow the client's reading it). */
async function turnsUntil(condition) {
  for (let turn = 0; turn < 1000 && !condition(); turn += 1) {
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** A shed request gets 503 with Retry-After, the others pass; then, if the app has `/items/:id`,
 * two requests to it: the local limit keeps each route's latency apart, named by the pattern the
 * router matched, not by the path. */
async function shedsOverHttp(listening, shedder, items = false) {
  const { server, base } = await listening;
  try {
    await shedder.report();
    assert.deepEqual(await get(base, "sheddable"), { status: 503, retryAfter: "60" }, "an interval");
    assert.equal((await get(base, "critical_plus")).status, 200);
    assert.equal((await get(base, "critical")).status, 200);
    // Its own requests are counted in what it reports.
    assert.ok(shedder.signals.seconds.some((second) => second[3] > 0));
    for (const id of items ? [1, 2] : []) {
      const response = await fetch(`${base}/items/${id}`, { headers: { "X-Priority": "critical" } });
      assert.equal(await response.text(), String(id));
    }
    const routes = items ? ["GET /", "GET /items/:id"] : ["GET /"];
    await turnsUntil(() => shedder.limit.routes.length >= routes.length);
    assert.deepEqual(shedder.limit.routes.sort(), routes);
  } finally {
    shedder.stop();
    server.close();
  }
}

test("Express: a shed request gets 503 with Retry-After over HTTP", async () => {
  const key = await service();
  const shedder = new LoadShedder(redis, key, { signals: signals(0.6), interval: 60, logger: quiet });
  const app = express();
  app.use(loadShedding(shedder, { priority: "x-priority" }));
  app.get("/", (req, res) => res.send("hello"));
  app.get("/items/:id", (req, res) => res.send(req.params.id));
  await shedsOverHttp(listen(app), shedder, true);
});

test("Node's http server: shedRequests sheds before Express sees the request", async () => {
  const http = require("node:http");
  const key = await service();
  const shedder = new LoadShedder(redis, key, { signals: signals(0.6), interval: 60, logger: quiet });
  const app = express();
  let seen = 0;
  app.use((req, res, next) => {
    seen += 1;
    next();
  });
  app.get("/", (req, res) => res.send("hello"));
  app.get("/items/:id", (req, res) => res.send(req.params.id));
  const server = http.createServer(shedRequests(shedder, app));
  const listening = new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => resolve({ server, base: `http://127.0.0.1:${server.address().port}` }));
  });
  await shedsOverHttp(listening, shedder, true);
  assert.equal(seen, 4, "Express saw the four requests admitted, not the one shed");
});

test("NestJS (on express): a shed request gets 503 with Retry-After over HTTP", async () => {
  const { NestFactory } = require("@nestjs/core");
  const { helloModule } = require("./apps/nest");
  const AppModule = helloModule();
  const key = await service();
  const shedder = new LoadShedder(redis, key, { signals: signals(0.6), interval: 60, logger: quiet });
  const app = await NestFactory.create(AppModule, { logger: false });
  app.use(loadShedding(shedder, { priority: (req) => req.headers["x-priority"] }));
  await app.listen(0, "127.0.0.1");
  const base = `http://127.0.0.1:${app.getHttpServer().address().port}`;
  try {
    await shedsOverHttp(Promise.resolve({ server: { close() {} }, base }), shedder);
  } finally {
    await app.close();
  }
});
