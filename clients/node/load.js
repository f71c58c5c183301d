// Load shedding (docs/load.md), two checks on every request, neither a server call:
// - the process's own limit on requests in flight (./concurrency): it follows the measured
//   latency, cuts when a standing queue forms and, while congested, keeps its top places for
//   the more important classes; it needs no server at all;
// - the fleet's level: the process reports its health under a service's key once an interval,
//   with no code from the user (CPU of its cgroup or itself, memory of its cgroup or the host,
//   requests in flight, latency, 5xx share, the requests and their successes, and what `bbr`
//   reads), and learns in the same call the service's level and the share of each priority
//   class it admits.
// A request goes on only when both admit it.
//
//     const { LoadShedder, loadShedding } = require("redis-ratelimit-module/load");
//     const shedder = new LoadShedder(redis, "load:checkout");
//     app.use(loadShedding(shedder, { priority: "x-priority" }));
//
// A shed request is answered 503 with Retry-After; a priority the request does not name is
// "sheddable". With `shadow: true` nothing is shed: what would be is counted ("shadow") and
// logged. When a report fails, the last level holds for the report's time to live, then the
// level is 0 (nothing shed by level); the process's own limit goes on protecting it.
"use strict";

const { countsForService, watching } = require("./answered");
const { reportCommand, reportResult } = require("./protocol");

const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { commandSender } = require("./index");
const { ConcurrencyLimit, LIMIT_DEFAULTS } = require("./concurrency");
const { AcceptProbe } = require("./accept");

const PRIORITIES = ["critical_plus", "critical", "sheddable_plus", "sheddable"];
const NOTHING_SHED = Object.freeze({ level: 0, instances: 0, shares: [1, 1, 1, 1] });

const read = (file) => {
  try {
    return fs.readFileSync(file, "ascii");
  } catch {
    return null;
  }
};

/** A class the service knows: `name` lower-cased, or "sheddable". */
function priorityOf(name) {
  const priority = String(name ?? "")
    .trim()
    .toLowerCase();
  return PRIORITIES.includes(priority) ? priority : "sheddable";
}

/** Whole microseconds, as the process's limit counts time. */
const micros = (seconds) => Math.round(seconds * 1e6);

// How often the event loop is watched (ms). A tick in which the loop waited for events at all
// (a fifth of a millisecond) found it idle: then no request was waiting for it, not even in the
// kernel's accept queue.
const LOOP_TICK = 5;
const IDLE_MS = 0.2;
// Node leaves the requests it has no time for in the kernel's accept queue, out of its sight:
// the time since the loop was last idle bounds a request's wait from above, and a burst a
// healthy service has every second can look deep, and its busy periods at 0.8 of its capacity
// reach 400 ms now and then. So congestion begins here at the eighth standing interval in a
// row (0.8 s of a queue that never drained), never at once on a deep one, as in Python's
// asyncio shedders (the limit's other options are the defaults).
// For the same reason a request's wait is not known, only bounded: it refuses nothing by
// itself (`sojourn`).
const EVENT_LOOP_LIMIT = Object.freeze({ enter: 8, deep: Infinity, sojourn: Infinity });

/** The share a standing admits of `priority`. */
const shareOf = (standing, priority) => standing.shares[PRIORITIES.indexOf(priorityOf(priority))];

/** The CPU used since the last reading, 0 to 1 of what the instance may use. In a container
 * with a CPU quota (cgroup v2 cpu.max), the cgroup's use (cpu.stat) over the quota: every
 * process of the container counts. Otherwise the process's own use over one core, capped at
 * 1: JavaScript runs on one thread, so one core is what a process can use however many the
 * host has, and a saturated process reads 1, not 1 over the host's cores. `processSeconds`
 * (CPU seconds the process used) is injectable. */
class CpuMeter {
  constructor({
    cgroup = "/sys/fs/cgroup",
    clock = () => performance.now() / 1000,
    processSeconds = () => {
      const { user, system } = process.cpuUsage();
      return (user + system) / 1e6;
    },
  } = {}) {
    Object.assign(this, { cgroup, clock, processSeconds, last: null });
  }

  /** The cgroup's quota in cores, or null when it has none. */
  quota() {
    const [limit, period] = (read(path.join(this.cgroup, "cpu.max")) ?? "").trim().split(/\s+/);
    if (limit && period && limit !== "max") return Math.max(Number(limit) / Number(period), 0.01);
    return null;
  }

  /** CPU seconds used so far: the cgroup's under a quota, else the process's. */
  used(quota) {
    if (quota === null) return this.processSeconds();
    const stat = read(path.join(this.cgroup, "cpu.stat"));
    const line = stat?.split("\n").find((one) => one.startsWith("usage_usec "));
    return line ? Number(line.split(" ")[1]) / 1e6 : null;
  }

  read() {
    const quota = this.quota();
    const now = this.clock();
    const used = this.used(quota);
    const last = this.last;
    this.last = used === null ? null : [now, used, quota];
    // A quota set or lifted since changes what is counted: a new baseline.
    if (!last || used === null || now <= last[0] || (last[2] === null) !== (quota === null)) return null;
    return Math.max(0, Math.min(1, (used - last[1]) / ((now - last[0]) * (quota ?? 1))));
  }
}

/** Memory in use over what is allowed, 0 to 1: the cgroup's (memory.current over memory.max),
 * else the host's (MemTotal - MemAvailable over MemTotal). */
function memoryShare({ cgroup = "/sys/fs/cgroup", meminfo = "/proc/meminfo" } = {}) {
  const current = read(path.join(cgroup, "memory.current"));
  const limit = read(path.join(cgroup, "memory.max"));
  if (current && limit && limit.trim() !== "max") {
    return Math.max(0, Math.min(1, Number(current) / Math.max(Number(limit), 1)));
  }
  const info = read(meminfo);
  const field = (name) => Number(info?.match(new RegExp(`^${name}:\\s+(\\d+)`, "m"))?.[1]);
  const [total, available] = [field("MemTotal"), field("MemAvailable")];
  if (total > 0 && available >= 0) return Math.max(0, Math.min(1, (total - available) / total));
  return Math.max(0, Math.min(1, 1 - os.freemem() / os.totalmem()));
}

/** The host's run queue over its cores (load1 / cores, Sentinel's system load). */
function hostLoad() {
  return os.loadavg()[0] / (os.cpus().length || 1);
}

// The routes a second keeps apart for min_rt; past them, the others share one entry.
const ROUTES_KEPT = 32;
const OTHER_ROUTES = Symbol("other routes");

/** The latency (ms) of the busy seconds' mix of requests with no queue, BBR's min RTT: each
 * route's least latency over them (its no-load latency), weighted by how many requests it
 * completed in them. With one route, its least latency; with a fast health check beside slow work,
 * the work's, not the check's (the least latency of all would shrink the pipe to what the check
 * holds, and read a service at its capacity as many times over it). `seconds` are each second's
 * Map(route => [completed, least latency]). */
function noLoadLatency(seconds) {
  const routes = new Map();
  for (const second of seconds) {
    for (const [route, [completed, least]] of second) {
      const total = routes.get(route) ?? [0, Infinity];
      routes.set(route, [total[0] + completed, Math.min(total[1], least)]);
    }
  }
  let weighted = 0;
  let completed = 0;
  for (const [count, least] of routes.values()) {
    weighted += count * least;
    completed += count;
  }
  return weighted / completed;
}

/** The requests the process serves, counted as they start and end, read once an interval. */
class Signals {
  constructor({ window = 10, clock = () => performance.now() / 1000, cpu = null, memory = null, load = null } = {}) {
    const meter = new CpuMeter({ clock });
    Object.assign(this, {
      window,
      clock,
      cpu: cpu ?? (() => meter.read()),
      memory: memory ?? (() => memoryShare()),
      load: load ?? hostLoad,
      inflight: 0,
      latencies: 0,
      finished: 0,
      failed: 0,
      // Per second of the window: [second, completed, Map(route => [completed, least latency
      // ms]), requests, successes, busy]. Only a busy second (the process's limit congested in
      // it) counts towards max_rps and min_rt: a second when it was not busy measured the
      // demand, not capacity.
      seconds: [],
    });
    // The CPU meter's first reading is its baseline: taken now, the first report has one.
    this.cpu();
  }

  second(now) {
    const second = Math.floor(now);
    if (this.seconds.length === 0 || this.seconds.at(-1)[0] !== second) {
      this.seconds.push([second, 0, new Map(), 0, 0, false]);
    }
    while (this.seconds.length && this.seconds[0][0] <= second - this.window) this.seconds.shift();
    return this.seconds.at(-1);
  }

  started() {
    this.inflight += 1;
  }

  /** A request ended with an answer that says nothing of the service (a limit's refusal, the
   * failure policy's): it leaves the requests in flight, and nothing else counts it. */
  left() {
    this.inflight = Math.max(0, this.inflight - 1);
  }

  /** A request ended after `latency` seconds with HTTP `status` (5xx: failed); `busy` when the
   * process's limit was congested (its throughput was its capacity, not the demand); `route`
   * names its route, whose least latency is kept apart (min_rt). */
  done(latency, status, busy = false, route = null) {
    this.inflight = Math.max(0, this.inflight - 1);
    this.latencies += latency;
    this.finished += 1;
    const failed = status >= 500;
    this.failed += failed ? 1 : 0;
    const second = this.second(this.clock());
    second[1] += 1;
    const routes = second[2];
    let key = route;
    let kept = routes.get(key);
    if (kept === undefined && routes.size >= ROUTES_KEPT) {
      key = OTHER_ROUTES;
      kept = routes.get(key);
    }
    if (kept === undefined) {
      routes.set(key, [1, latency * 1000]);
    } else {
      kept[0] += 1;
      kept[1] = Math.min(kept[1], latency * 1000);
    }
    second[3] += 1;
    second[4] += failed ? 0 : 1;
    second[5] = second[5] || busy;
  }

  /** The factors to report now, and the interval starts again. */
  sample() {
    const cpu = this.cpu();
    const memory = this.memory();
    const load = this.load();
    this.second(this.clock());
    const factors = { inflight: this.inflight };
    if (cpu !== null) factors.cpu = cpu;
    if (memory !== null) factors.memory = memory;
    if (load !== null) factors.load = load;
    if (this.finished) {
      factors.latency = (this.latencies / this.finished) * 1000;
      factors.errors = this.failed / this.finished;
    }
    const full = this.seconds.filter((second) => second[1] > 0 && second[5]);
    if (full.length) {
      factors.max_rps = Math.max(...full.map((second) => second[1]));
      factors.min_rt = noLoadLatency(full.map((second) => second[2]));
    }
    factors.requests = this.seconds.reduce((sum, second) => sum + second[3], 0);
    factors.successes = this.seconds.reduce((sum, second) => sum + second[4], 0);
    Object.assign(this, { latencies: 0, finished: 0, failed: 0 });
    return factors;
  }
}

/**
 * Reports every `interval` seconds (a timer that does not keep the process alive) and sheds by
 * the standing the last report answered.
 *
 * Options: `instance` (this process's name, `host:pid`); `interval` (s, 1); `ttl` (s, 3
 * intervals: how long a report counts); `timeout` (ms, 1000) a report waits at most; `shadow`;
 * `metrics` (a PrometheusMetrics from ./metrics); `factors`, a function answering the
 * application's own factors to add to each report (`() => ({ queue: jobs.length })`: a queue's
 * backlog, a pool's waiters, any number a policy names); `limit`, the process's own limit on
 * requests in flight (on by default: `true`; a ConcurrencyLimit of your options; `false` to shed
 * by the level alone); `acceptProbe` (true): time the server's accept queue by a connection of
 * the shedder's own (./accept), so that a request's wait is at most what that connection waited,
 * not the whole time since the event loop was last idle; `signals`, `random`, `clock` (seconds;
 * the tests').
 */
class LoadShedder {
  constructor(
    client,
    service,
    {
      instance = `${os.hostname()}:${process.pid}`,
      interval = 1,
      ttl = null,
      timeout = 1000,
      shadow = false,
      metrics = null,
      signals = null,
      factors = null,
      random = Math.random,
      clock = () => performance.now() / 1000,
      logger = console,
      limit = true,
      acceptProbe = true,
    } = {},
  ) {
    Object.assign(this, { service, instance, interval, timeout, shadow, metrics, factors, random, clock, logger });
    this.limit = limit === true ? new ConcurrencyLimit(EVENT_LOOP_LIMIT) : limit || null;
    // When the event loop was last seen idle: a request the middleware sees now arrived after
    // it, so it waited at most since then (null: no loop watched).
    this.idleAt = null;
    this.watch = null;
    // The server's accept queue, timed by a connection of the shedder's own (./accept), once a
    // request showed which server it came through (undefined: none yet; null: none to probe).
    this.probe = acceptProbe ? undefined : null;
    this.ttl = ttl ?? 3 * interval;
    this.send = commandSender(client);
    this.signals = signals ?? new Signals({ clock });
    this.last = NOTHING_SHED;
    this.reportedAt = -Infinity;
    this.timer = null;
  }

  /** The service's level and shares from the last report that answered; level 0 once that
   * report's time to live has passed. */
  get standing() {
    return this.clock() - this.reportedAt > this.ttl ? NOTHING_SHED : this.last;
  }

  /** The signals and the application's own factors: a callback that fails costs its factors,
   * never the report. */
  sample() {
    const factors = this.signals.sample();
    if (!this.factors) return factors;
    try {
      const own = {};
      for (const [name, value] of Object.entries(this.factors())) {
        own[name] = Number(value);
        if (Number.isNaN(own[name])) throw new Error(`${name} is not a number`);
      }
      Object.assign(factors, own);
    } catch (error) {
      this.logger.warn?.(`ratelimit: the load factors of ${this.service} failed: ${error.message}`);
    }
    return factors;
  }

  /** Reports now; the standing the server answered, or null when it failed (or timed out). */
  async report() {
    const command = reportCommand(this.service, this.instance, this.ttl, this.sample());
    let timer;
    try {
      const late = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("the load report timed out")), this.timeout);
      });
      const reply = await Promise.race([this.send(command), late]);
      this.last = reportResult(reply);
      this.reportedAt = this.clock();
      this.metrics?.loadLevel?.(this.service, this.last.level);
      return this.last;
    } catch (error) {
      this.logger.warn?.(`ratelimit: the load report of ${this.service} failed: ${error.message}`);
      return null;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Starts reporting every interval, and watching the event loop every 5 ms (once): a request
   * waits for a busy loop (in the kernel's accept queue: Node accepts one connection at a time)
   * before any middleware sees it, so the time since the loop was last idle counts in its
   * latency and, as that much work ahead of it, in the requests the limit counts. */
  start() {
    if (this.timer === null) {
      this.report();
      this.timer = setInterval(() => this.report(), this.interval * 1000);
      this.timer.unref?.();
    }
    if (this.watch === null && this.limit !== null) {
      let last = performance.eventLoopUtilization();
      let tickAt = this.clock();
      this.idleAt = tickAt;
      this.watch = setInterval(() => {
        const delta = performance.eventLoopUtilization(last);
        last = performance.eventLoopUtilization();
        const since = tickAt;
        tickAt = this.clock();
        if (delta.idle >= IDLE_MS) {
          this.idleAt = tickAt;
          this.probe?.idle(since);
        } else {
          this.probe?.send();
        }
      }, LOOP_TICK);
      this.watch.unref?.();
    }
    return this;
  }

  stop() {
    clearInterval(this.timer);
    clearInterval(this.watch);
    this.timer = null;
    this.watch = null;
    this.probe?.stop();
  }

  /** Probes the accept queue of `server` (a request's `req.socket.server`), the first time one is
   * seen, where the process's limit is on and the server can be probed. */
  seeServer(server) {
    if (this.probe !== undefined) return;
    this.probe = this.limit === null ? null : AcceptProbe.of(server, this.clock);
  }

  /** Whether a request of `priority` goes on: a ticket (for `finished`) when both the level (the
   * share it gives the class, at random) and the process's limit admit it; null when it is shed.
   * In shadow mode always a ticket, counting what would be shed ("shadow"). */
  admit(priority) {
    const name = priorityOf(priority);
    const standing = this.standing;
    const byLevel = this.random() < shareOf(standing, name);
    const now = this.clock();
    const waited = this.waited(now);
    const counted =
      byLevel && this.limit !== null && this.limit.admit(PRIORITIES.indexOf(name), micros(now), micros(waited));
    // What the level refused is shedding too: the limit counts it among its interval's refusals.
    if (!byLevel && this.limit !== null) this.limit.shedByLevel(micros(now));
    const admitted = byLevel && (counted || this.limit === null);
    const outcome = admitted ? "admitted" : this.shadow ? "shadow" : byLevel ? "shed_local" : "shed";
    this.metrics?.loadDecision?.(this.service, name, outcome);
    if (outcome === "shadow") {
      const why = byLevel ? "by the process's limit" : `at level ${standing.level}`;
      this.logger.info?.(`ratelimit: shadow: ${name} would be shed ${why} of ${this.service}`);
    }
    if (!admitted && !this.shadow) return null;
    this.signals.started();
    // Its latency counts from when it may have arrived: since the loop was last idle.
    // `waits`: how many waits on the rate-limit server it has going on; `done` once finished.
    return { started: now - waited, counted, waits: 0, done: false };
  }

  /** How long a request decided at `now` may have waited before the middleware saw it: the time
   * since the event loop was last seen idle (a loop that was idle had nobody waiting), and no more
   * than a connection now waits in the server's accept queue, where a probe times it. */
  waited(now) {
    if (this.idleAt === null) return 0;
    const sinceIdle = Math.max(0, now - this.idleAt);
    const queued = this.probe?.wait(now) ?? null;
    return queued === null ? sinceIdle : Math.min(sinceIdle, queued);
  }

  /** What a shed request is told to wait: one interval, when the level may have changed. */
  get retryAfter() {
    return this.interval;
  }

  /** The request `admit` gave `ticket` begins (`begins`) or ends a wait on the rate-limit server:
   * it leaves the process's requests in flight meanwhile (a frozen server's timeout is not the
   * service's concurrency). */
  waiting(ticket, begins) {
    if (this.limit === null || !ticket.counted) return;
    ticket.waits += begins ? 1 : -1;
    // The first wait to begin leaves, the last to end comes back; none once it finished.
    if (ticket.done || ticket.waits !== (begins ? 1 : 0)) return;
    const now = micros(this.clock());
    if (begins) this.limit.leave(now);
    else this.limit.back(now);
  }

  /** The request `admit` gave `ticket` ended with HTTP `status`; `own` when the package answered
   * it by its policy (answered.js): then, as for any 429, it leaves the requests in flight and
   * says nothing of the service's health, nor its latency of the local limit's (a failing
   * server's timeout is not the service's time). `route` names its route (method and path
   * pattern), whose latency the local limit keeps apart. */
  finished(ticket, status, own = false, route = null) {
    const now = this.clock();
    const latency = Math.max(0, now - ticket.started);
    if (this.limit !== null && ticket.counted) {
      // It ended while waiting on the server: in flight again, to leave as it ends.
      if (ticket.waits > 0 && !ticket.done) this.limit.back(micros(now));
      ticket.done = true;
      if (own) this.limit.leave(micros(now));
      else this.limit.finish(micros(latency), micros(now), route);
    }
    if (countsForService(status, own)) this.signals.done(latency, status, this.limit?.congested ?? false, route);
    else this.signals.left();
  }
}

/** The route a request took, for the local limit to keep its latency apart: its method and the
 * pattern the router matched (Express's `req.route`, under NestJS too), read once the response
 * ended; the path itself where no router matched. */
function routeOf(req) {
  const pattern = req.route?.path;
  if (typeof pattern === "string") return `${req.method} ${req.baseUrl ?? ""}${pattern}`;
  return `${req.method} ${(req.originalUrl ?? req.url ?? "").split("?")[0]}`;
}

/** `priority` as a function of a Node request: a header's name (any case) or a function. */
function priorityReader(priority) {
  if (typeof priority === "function") return priority;
  const name = String(priority).toLowerCase();
  return (req) => req.headers[name];
}

/**
 * Admits or sheds the request `req`; a shed one is answered 503 with Retry-After on `res` (Node's
 * own ServerResponse: no framework's response object is made), an admitted one goes on to
 * `next` and is counted in the shedder's limit and signals until its response ends.
 */
function shed(shedder, priority, req, res, next) {
  shedder.seeServer(req.socket?.server);
  const ticket = shedder.admit(priority);
  if (ticket === null) {
    res.writeHead(503, {
      "Content-Type": "text/plain; charset=utf-8",
      "Content-Length": "19",
      "Retry-After": String(Math.max(1, Math.ceil(shedder.retryAfter))),
    });
    res.end("Service Unavailable");
    return;
  }
  let done = false;
  let request = null;
  const finish = (status) => {
    if (!done) shedder.finished(ticket, status, request?.own ?? false, routeOf(req));
    done = true;
  };
  res.on("finish", () => finish(res.statusCode));
  res.on("close", () => finish(res.writableFinished ? res.statusCode : 499));
  request = watching(next, (begins) => shedder.waiting(ticket, begins));
}

/**
 * Express middleware: sheds by `shedder`'s level and the process's own limit before the routes
 * (503 with Retry-After) and counts every request in its signals. `priority` is a header's name
 * ("x-priority") or a function of the request. Express has run its own setup of the request by
 * then; `shedRequests` refuses before any of it.
 */
function loadShedding(shedder, { priority = "x-priority" } = {}) {
  const priorityOf = priorityReader(priority);
  shedder.start();
  return function shedByLoad(req, res, next) {
    shed(shedder, priorityOf(req), req, res, next);
  };
}

/**
 * A request listener for Node's http server that sheds before `listener` (an Express app, a
 * Fastify or Koa callback, any `(req, res)`) sees the request: the cheapest refusal Node allows,
 * at the server's `request` event, before any routing or body parsing.
 *
 *     http.createServer(shedRequests(new LoadShedder(redis, "load:checkout"), app)).listen(8080);
 *
 * Options as `loadShedding`'s.
 */
function shedRequests(shedder, listener, { priority = "x-priority" } = {}) {
  const priorityOf = priorityReader(priority);
  shedder.start();
  return function shedThenServe(req, res) {
    shed(shedder, priorityOf(req), req, res, () => listener(req, res));
  };
}

module.exports = {
  ConcurrencyLimit,
  LIMIT_DEFAULTS,
  LoadShedder,
  Signals,
  CpuMeter,
  loadShedding,
  shedRequests,
  memoryShare,
  priorityOf,
  reportCommand,
  reportResult,
  PRIORITIES,
  NOTHING_SHED,
  ROUTES_KEPT,
};
