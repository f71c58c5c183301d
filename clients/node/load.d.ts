// Types of redis-ratelimit-module/load: load shedding (docs/load.md).
import type { Client } from "./index";

/** The local limit's parameters: times in whole microseconds, shares most important first. */
export interface LimitOptions {
  initial?: number;
  floor?: number;
  ceiling?: number;
  intervalUs?: number;
  targetUs?: number;
  enter?: number;
  deep?: number;
  epochUs?: number;
  decay?: number;
  shares?: readonly number[];
  /** While congested, a request below the top class is refused once its wait passes this many
   * times its share of the target (Infinity: never). */
  sojourn?: number;
}

/** The defaults every package ships. */
export const LIMIT_DEFAULTS: Readonly<Required<LimitOptions>>;

/** The process's own limit on requests in flight (docs/load.md, "The local limit"). */
export class ConcurrencyLimit {
  constructor(options?: LimitOptions);
  readonly options: Required<LimitOptions>;
  /** The limit now. */
  limit: number;
  /** Requests admitted and not finished. */
  inflight: number;
  /** Whether a standing queue was found and has not cleared. */
  congested: boolean;
  /** How many times the limit changed, and congestion began. */
  changes: number;
  congestions: number;
  /** The service's no-load latency in µs, over every route (Infinity before any). */
  readonly noload: number;
  /** The routes whose latencies are kept apart, as their requests named them. */
  readonly routes: string[];
  /** Whether a request of `priority` (a class's name or 0 to 3) is admitted at `now` (µs). */
  admit(priority: string | number, now: number): boolean;
  /** An admitted request of `route` (its method and path pattern; null: unnamed) ended at `now`
   * after `latency` (µs both): its latency is also kept apart, with its route's (the first 32). */
  finish(latency: number, now: number, route?: string | null, backlog?: number): void;
  /** An admitted request the package answered itself ended at `now` (µs), or began to wait on the
   * rate-limit server (until `back`): it leaves the requests in flight, its latency not counted. */
  leave(now: number): void;
  /** A request that left the requests in flight while it waited on the rate-limit server got its
   * answer, or gave up on it, at `now` (µs): it is in flight again, whatever the limit. */
  back(now: number): void;
}

/** What `admit` gives a request that goes on, for `finished`. */
export interface Ticket {
  /** When it began, by the shedder's clock (seconds). */
  started: number;
  /** Whether the process's limit counts it in flight. */
  counted: boolean;
  /** How many waits on the rate-limit server it has going on (out of the requests in flight). */
  waits: number;
  /** Whether it finished. */
  done: boolean;
}

/** The four priority classes, most important first. */
export const PRIORITIES: readonly ["critical_plus", "critical", "sheddable_plus", "sheddable"];

/** A service's level, its instances reporting, and the share admitted per class. */
export interface LoadStanding {
  level: number;
  instances: number;
  /** critical_plus, critical, sheddable_plus, sheddable: 0 to 1. */
  shares: number[];
}

export const NOTHING_SHED: LoadStanding;

/** How many routes a second keeps apart for min_rt; past them, the others share one entry. */
export const ROUTES_KEPT: number;

/** What the process measures of itself between reports. */
export class Signals {
  constructor(options?: {
    window?: number;
    clock?: () => number;
    cpu?: (() => number | null) | null;
    memory?: (() => number | null) | null;
    /** The host's load1 over its cores, by default. */
    load?: (() => number | null) | null;
  });
  started(): void;
  /** A request ended after `latency` seconds with HTTP `status`; `busy` when the process's
   * limit was congested (only busy seconds count towards max_rps and min_rt); `route` names its
   * route, whose least latency is kept apart: min_rt is the no-load latency of the busy seconds'
   * mix of routes, not of the fastest one. */
  done(latency: number, status: number, busy?: boolean, route?: string | null): void;
  /** The factors to report now. */
  sample(): Record<string, number>;
}

/** With a cgroup CPU quota, the cgroup's use over it; otherwise the process's over one core. */
export class CpuMeter {
  constructor(options?: { cgroup?: string; clock?: () => number; processSeconds?: () => number });
  read(): number | null;
}

export function memoryShare(options?: { cgroup?: string; meminfo?: string }): number | null;
export function priorityOf(name: unknown): string;
export function reportCommand(
  key: string,
  instance: string,
  ttl: number,
  factors: Record<string, number>,
): (string | number)[];
export function reportResult(reply: unknown[]): LoadStanding;

export interface LoadShedderOptions {
  /** This process's name among the service's instances (host:pid). */
  instance?: string;
  /** Seconds between reports (1). */
  interval?: number;
  /** Seconds a report counts (3 intervals). */
  ttl?: number | null;
  /** Milliseconds a report waits at most (1000). */
  timeout?: number;
  /** Nothing shed: what would be is counted ("shadow") and logged. */
  shadow?: boolean;
  /** A PrometheusMetrics from ./metrics. */
  metrics?: object | null;
  signals?: Signals | null;
  /** The application's own factors, added to each report: () => ({ queue: jobs.length }). */
  factors?: (() => Record<string, number>) | null;
  /** The process's own limit on requests in flight: true (the default), a ConcurrencyLimit of
   * your options, or false to shed by the level alone. */
  limit?: boolean | ConcurrencyLimit | null;
  /** Whether the server's accept queue is timed by a connection of the shedder's own, once a
   * request shows the server (true, the default; off in a cluster's worker and on a pipe): a
   * request's wait is then at most what that connection waited, not the whole time since the
   * event loop was last idle (docs/load.md, "The local limit"). */
  acceptProbe?: boolean;
  random?: () => number;
  /** Seconds of a monotonic clock. */
  clock?: () => number;
  logger?: object;
}

export class LoadShedder {
  constructor(client: Client, service: string, options?: LoadShedderOptions);
  readonly standing: LoadStanding;
  readonly retryAfter: number;
  signals: Signals;
  /** The signals and the application's own factors, as the next report sends them. */
  sample(): Record<string, number>;
  report(): Promise<LoadStanding | null>;
  start(): this;
  stop(): void;
  /** The process's own limit, or null when off. */
  limit: ConcurrencyLimit | null;
  /** A ticket when both the level and the process's limit admit the request; null when shed. */
  admit(priority: unknown): Ticket | null;
  /** The request `admit` gave `ticket` ended with HTTP `status`; `own` when the package answered
   * it by its policy (then, as any 429, it says nothing of the service's health); `route` names its
   * route (method and path pattern), whose latency the process's limit keeps apart. */
  finished(ticket: Ticket, status: number, own?: boolean, route?: string | null): void;
  /** The request `admit` gave `ticket` begins (`begins`) or ends a wait on the rate-limit server:
   * it leaves the process's requests in flight meanwhile. The middlewares call it for you. */
  waiting(ticket: Ticket, begins: boolean): void;
}

/** Express middleware (and NestJS on express, through `app.use`). */
export function loadShedding(
  shedder: LoadShedder,
  options?: { priority?: string | ((req: unknown) => unknown) },
): (req: unknown, res: unknown, next: () => void) => void;

/** A request listener for Node's http server that sheds before `listener` (an Express app, any
 * `(req, res)`) sees the request: `http.createServer(shedRequests(shedder, app))`. */
export function shedRequests(
  shedder: LoadShedder,
  listener: (req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => void,
  options?: { priority?: string | ((req: import("node:http").IncomingMessage) => unknown) },
): (req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => void;
