// The instance's own limit on requests in flight, decided at admission with no server call
// (docs/load.md, "The local limit"): it follows measured latency, cuts when a standing queue
// forms (CoDel's test: an interval whose fastest request still waited), grows back while none
// does, and while congested reserves its top places for the more important classes (trunk
// reservation) and refuses a request below the top class that waited past its share of the target
// (CoDel's sojourn, per request). The same algorithm, step for step, as every package's (clients/conformance.json,
// `concurrency`). Plain JavaScript, no I/O: the clock is passed in.
"use strict";

const PRIORITIES = ["critical_plus", "critical", "sheddable_plus", "sheddable"];

// How many intervals in a row (of those that finished a request) must have taken a latency for it
// to be the no-load latency.
const CONFIRMING = 4;
// How many calm intervals in a row (of those that decided a request) end congestion: one is an
// overload's arrivals coming and going.
const CALM_INTERVALS_TO_END = 4;

// The most routes whose latencies are kept apart; a request of any other route is counted with
// those that name none.
const ROUTES = 32;

/** The no-load latency of one route (or of the whole service): the least of the current and the
 * previous epoch that CONFIRMING intervals in a row (of those that finished one of its requests)
 * took at least; until CONFIRMING - 1 such intervals have ended, also the least any request took
 * (a cold start's). */
class Latencies {
  constructor() {
    this.noloadNow = Infinity;
    this.noloadBefore = Infinity;
    // The fastest request of each of the last intervals that finished any, oldest first.
    this.recentFastest = new Array(CONFIRMING - 1).fill(Infinity);
    // The fastest request of the current interval.
    this.windowMin = Infinity;
  }

  get noload() {
    return Math.min(this.noloadNow, this.noloadBefore);
  }

  /** Whether CONFIRMING - 1 intervals have finished a request: past the cold start. */
  get confirmed() {
    return this.recentFastest[0] < Infinity;
  }

  finished(latency) {
    this.windowMin = Math.min(this.windowMin, latency);
    if (!this.confirmed) this.noloadNow = Math.min(this.noloadNow, latency);
  }

  /** The interval ended: its fastest lowers the no-load latency as far as the intervals before it
   * agree (a fast request now and then is not what the others take). */
  closeInterval() {
    if (this.windowMin < Infinity) {
      const agreed = Math.max(this.windowMin, ...this.recentFastest);
      this.noloadNow = Math.min(this.noloadNow, agreed);
      this.recentFastest.shift();
      this.recentFastest.push(this.windowMin);
    }
    this.windowMin = Infinity;
  }

  nextEpoch() {
    this.noloadBefore = this.noloadNow;
    this.noloadNow = Infinity;
  }
}

/** The parameters every package ships: times in whole microseconds (so that every package
 * compares them exactly), shares most important class first. */
const LIMIT_DEFAULTS = Object.freeze({
  initial: 20,
  floor: 4,
  ceiling: 1000,
  intervalUs: 100_000,
  targetUs: 5_000,
  enter: 4,
  deep: 4,
  epochUs: 30_000_000,
  decay: 0.95,
  shares: Object.freeze([1, 0.6, 0.4, 0.2]),
  // While congested, a request below the top class is refused once its wait passes `sojourn` times
  // its share of the target; Infinity: never (a wait known only as a bound).
  sojourn: 1,
});

/** 0 (critical_plus) to 3 (sheddable), from a class's name or number. */
function priorityIndex(priority) {
  if (typeof priority === "number") return Math.min(Math.max(priority, 0), 3);
  const index = PRIORITIES.indexOf(priority);
  if (index < 0) throw new TypeError(`unknown priority: ${priority}`);
  return index;
}

class ConcurrencyLimit {
  constructor(options = {}) {
    this.options = { ...LIMIT_DEFAULTS, ...options };
    this.limit = this.options.initial;
    this.inflight = 0;
    this.congested = false;
    // How many times the limit changed, and congestion began (for the bench).
    this.changes = 0;
    this.congestions = 0;
    this.windowEnd = null;
    this.peak = 0;
    // The interval's admitted and refused requests, and of those refused, how many for their
    // own wait.
    this.admitted = 0;
    this.refused = 0;
    this.waitedOut = 0;
    // Of the refused, how many the service's level refused (not this limit's shares).
    this.byLevel = 0;
    // Whether the limit refused a request while not congested: the requests in flight reached it
    // (or the initial limit).
    this.full = false;
    // The interval's finished requests, how many of them took longer than the target, and the
    // fewest requests in flight it saw.
    this.finished = 0;
    this.queued = 0;
    this.trough = 0;
    // The requests left waiting when the last request finished, where the package counts them (a
    // run queue's): a service whose requests in flight fall to none between two requests while
    // the next ones wait is not idle.
    this.behind = 0;
    this.standingRun = 0;
    // While congested, intervals in a row (of those that decided a request) that ended with the
    // peak under half the limit and fewer refused than admitted.
    this.calmRun = 0;
    // Intervals in a row whose latency no queue here explains.
    this.unexplained = 0;
    // Every request's latencies (what admission converts a wait with), and each route's (what the
    // standing-queue test reads: a route's fastest against its own target), the requests that name
    // none, or a route past the first ROUTES, under null.
    this.service = new Latencies();
    this.routeLatencies = new Map([[null, new Latencies()]]);
    this.epochEnd = 0;
  }

  /** The service's no-load latency, over every route: the least of this epoch and the last
   * (Infinity before any). */
  get noload() {
    return this.service.noload;
  }

  /** The routes whose latencies are kept apart, as their requests named them. */
  get routes() {
    return [...this.routeLatencies.keys()].filter((route) => route !== null);
  }

  /** The latency a request may take without a queue standing: the no-load latency plus the longer
   * of one more and `targetUs` (a burst's queue), or, while congested, plus `targetUs` alone
   * (CoDel's), so that the queue kept while shedding stays short where requests are slow by nature,
   * behind a pool of a few slots. */
  target(noload) {
    const queue = this.congested ? this.options.targetUs : Math.max(noload, this.options.targetUs);
    return noload + queue;
  }

  /** Closes the interval that ended at or before `now`, if any. */
  roll(now) {
    const o = this.options;
    if (this.windowEnd === null) {
      this.windowEnd = now + o.intervalUs;
      this.epochEnd = now + o.epochUs;
      return;
    }
    while (now >= this.epochEnd) {
      this.service.nextEpoch();
      for (const [route, latencies] of [...this.routeLatencies]) {
        latencies.nextEpoch();
        // A route with no request for two epochs leaves its place to another.
        if (route !== null && latencies.noload === Infinity) this.routeLatencies.delete(route);
      }
      this.epochEnd += o.epochUs;
    }
    if (now < this.windowEnd) return;
    const bound = this.peak >= this.limit / 2;
    // The interval is read by the fastest route that finished a request in it (of those past their
    // cold start, if any is): a queue delays every route's requests, and the fastest route's show
    // the least of one; a route's fastest is set against its own target, so that an interval
    // without a fast route's request (a health check's) is no queue.
    const judge = this.judgingRoute();
    const measured = judge !== null;
    const fastest = measured ? judge.windowMin : Infinity;
    const target = measured ? this.target(judge.noload) : Infinity;
    // While congested, a queue stands whatever the peak: the probe may raise the limit past it.
    let standing = measured && (bound || this.congested) && fastest > target;
    // While congested, a fastest request slower than every request of the peak ahead of it at the
    // target each: no queue here explains it, the service itself got slower (a dependency). After
    // `enter` such intervals the no-load latency is what it takes now.
    const unexplained = standing && this.congested && fastest > Math.max(1, this.peak) * target;
    this.unexplained = unexplained ? this.unexplained + 1 : 0;
    if (this.unexplained >= o.enter) {
      for (const latencies of [this.service, ...this.routeLatencies.values()]) {
        if (latencies.windowMin < Infinity) {
          latencies.noloadNow = latencies.windowMin;
          latencies.noloadBefore = latencies.windowMin;
        }
      }
      this.unexplained = 0;
      standing = false;
    }
    this.standingRun = standing ? this.standingRun + 1 : 0;
    const before = this.limit;
    let calm = false;
    // A queue that stands while the limit, not congested, is full is an overload already: a burst
    // a healthy service holds neither fills it nor stands.
    const atOnce = standing && (fastest > o.deep * target || this.full);
    if (standing && (this.congested || atOnce || this.standingRun >= o.enter)) {
      const gradient = Math.max(0.2, Math.min(0.9, target / fastest));
      this.limit = Math.max(o.floor, Math.min(this.limit, this.peak) * gradient);
      if (!this.congested) this.congestions += 1;
      this.congested = true;
    } else if (standing) {
      // Not yet: a queue must stand for `enter` intervals, be deep, or fill the limit.
    } else if (bound && measured) {
      if (!this.congested) this.limit = Math.min(o.ceiling, this.limit + Math.sqrt(this.limit));
      // Congested, it grows by one, unless a queue came and went at this limit (over a tenth of
      // the requests took longer than the target) while the service never went idle: the limit
      // is what it can hold (a pool's size), and probing past it is a queue.
      else if (this.queued * 10 <= this.finished || this.trough === 0) {
        this.limit = Math.min(o.ceiling, this.limit + 1);
      }
    } else if (!bound) {
      // Shedding keeps the queue short: what it refused is the overload going on. One calm
      // interval is no end (an overload's arrivals come and go).
      if (this.congested && this.refused < this.admitted) {
        calm = true;
        if (this.calmRun + 1 >= CALM_INTERVALS_TO_END) this.congested = false;
      }
      // Refusing by the shares alone, under half the limit: room is probed for as headroom,
      // so that a load the shares hold back cannot keep it (what a request's own wait refused is a
      // queue, not the shares).
      else if (this.congested) {
        if (this.refused - this.waitedOut - this.byLevel >= this.admitted) {
          this.limit = Math.min(o.ceiling, this.limit + Math.sqrt(this.limit));
        }
      } else this.limit = Math.max(o.floor, 2 * this.peak, this.limit * o.decay);
    }
    if (calm) this.calmRun = this.congested ? this.calmRun + 1 : 0;
    // An interval that decided nothing neither continues a calm run nor breaks it.
    else if (this.admitted || this.refused) this.calmRun = 0;
    if (this.limit !== before) this.changes += 1;
    this.service.closeInterval();
    for (const latencies of this.routeLatencies.values()) latencies.closeInterval();
    this.peak = this.inflight;
    this.trough = this.inflight + this.behind;
    this.finished = 0;
    this.queued = 0;
    this.admitted = 0;
    this.refused = 0;
    this.waitedOut = 0;
    this.byLevel = 0;
    this.full = false;
    this.windowEnd = now + o.intervalUs;
  }

  /** The route whose fastest request of the interval reads it: of the routes that finished a
   * request in it with a no-load latency known (past their cold start, if any is), the fastest by
   * nature (then by its fastest, so that the order never matters); null if no route did. */
  judgingRoute() {
    const measured = [...this.routeLatencies.values()].filter(
      (route) => route.windowMin < Infinity && route.noload < Infinity,
    );
    const pastColdStart = measured.filter((route) => route.confirmed);
    const candidates = pastColdStart.length > 0 ? pastColdStart : measured;
    let judge = null;
    for (const route of candidates) {
      if (
        judge === null ||
        route.noload < judge.noload ||
        (route.noload === judge.noload && route.windowMin < judge.windowMin)
      ) {
        judge = route;
      }
    }
    return judge;
  }

  /** Whether a request of `priority` (a name or 0 to 3) is admitted at `now` (whole microseconds
   * of a monotonic clock); an admitted one is in flight until `finish`. `backlog` is how long the
   * request waited before it could be decided (µs; the event loop's lag): the work ahead of it,
   * counted as that many no-load latencies' worth of requests in flight (for every class but the
   * top one), and, while congested, its own wait, refused past its share of the target. */
  admit(priority, now, backlog = 0) {
    this.roll(now);
    const noload = this.noload;
    const waiting = backlog > 0 && noload < Infinity ? backlog / noload : 0;
    const load = this.inflight + waiting;
    // The backlog refuses only while congested: a burst's wait is no standing queue.
    const index = priorityIndex(priority);
    // The top class counts only what is in flight: the backlog is a guess of the queue (the
    // time since the loop was last idle), and its places are kept.
    const counted = index === 0 ? this.inflight : load;
    const share = this.options.shares[index];
    // Not congested, the initial limit admits too: the limit eased down is what the standing-queue
    // test reads, and a burst that a fresh service admits, an idle one admits as well.
    const cap = Math.max(this.limit, this.options.initial);
    let admitted = this.congested ? counted < this.limit * share : this.inflight < cap;
    this.full ||= !this.congested && !admitted;
    let waitedOut = false;
    if (admitted && this.congested && index > 0 && waiting > 0) {
      waitedOut = backlog >= this.options.sojourn * share * this.target(noload);
      admitted = !waitedOut;
    }
    // The peak is what the limit counted the request against: for the top class, what is in
    // flight alone, so that a loop kept busy by the top class (a readiness probe's, a load
    // test's), whose backlog is a guess, reads as no queue to cut.
    if (admitted) {
      this.inflight += 1;
      this.admitted += 1;
      this.peak = Math.max(this.peak, counted + 1);
      return true;
    }
    this.peak = Math.max(this.peak, counted);
    this.refused += 1;
    if (waitedOut) this.waitedOut += 1;
    return false;
  }

  /** An admitted request of `route` (its method and path pattern; null: unnamed) ended at `now`
   * after `latency`, leaving `backlog` of work waiting for the service where the package counts it
   * (a run queue's; 0 here: whole microseconds all): the service is not idle while it waits. */
  finish(latency, now, route = null, backlog = 0) {
    this.roll(now);
    this.inflight = Math.max(0, this.inflight - 1);
    const noload = this.noload;
    this.behind = backlog > 0 && noload < Infinity ? backlog / noload : 0;
    this.trough = Math.min(this.trough, this.inflight + this.behind);
    this.service.finished(latency);
    const latencies = this.latenciesOf(route);
    latencies.finished(latency);
    this.finished += 1;
    if (latency > this.target(latencies.noload)) this.queued += 1;
  }

  /** `route`'s latencies, kept apart for the first ROUTES routes named. */
  latenciesOf(route) {
    let latencies = this.routeLatencies.get(route ?? null);
    if (latencies === undefined) {
      if (this.routeLatencies.size > ROUTES) return this.routeLatencies.get(null);
      latencies = new Latencies();
      this.routeLatencies.set(route, latencies);
    }
    return latencies;
  }

  /** A request the service's level refused at `now` before this limit decided it: one more refusal
   * of the interval, as shedding's own (the overload goes on while anything is refused: the level's
   * refusals keep congestion from ending when they leave this limit only a trickle to decide), never
   * in flight. */
  shedByLevel(now) {
    this.roll(now);
    this.refused += 1;
    this.byLevel += 1;
  }

  /** An admitted request ended at `now` with an answer that says nothing of the service's latency
   * (the package's own: a refusal, a failure policy's answer while the server failed), or began to
   * wait on the rate-limit server (until `back`): it leaves the requests in flight, and no latency
   * is counted. */
  leave(now) {
    this.roll(now);
    this.inflight = Math.max(0, this.inflight - 1);
    this.trough = Math.min(this.trough, this.inflight);
  }

  /** A request that left the requests in flight (`leave`) while it waited on the rate-limit server
   * got its answer, or gave up on it, at `now`: it is in flight again, whatever the limit (it was
   * admitted). A frozen server's timeout is not the service's concurrency: counted, a service whose
   * requests wait on it refuses its other routes. */
  back(now) {
    this.roll(now);
    this.inflight += 1;
    if (this.inflight > this.peak) this.peak = this.inflight;
  }
}

module.exports = { ConcurrencyLimit, LIMIT_DEFAULTS, PRIORITIES, priorityIndex };
