// Types of redis-ratelimit-module/load: graded limiting by load (docs/load.md).
import type { Client } from "./index";

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
  /** A request ended after `latency` seconds with HTTP `status`. */
  done(latency: number, status: number): void;
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
  random?: () => number;
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
  admit(priority: unknown): boolean;
  started(): number;
  finished(started: number, status: number): void;
}

/** Express middleware (and NestJS on express, through `app.use`). */
export function loadShedding(
  shedder: LoadShedder,
  options?: { priority?: string | ((req: unknown) => unknown) },
): (req: unknown, res: unknown, next: () => void) => void;
