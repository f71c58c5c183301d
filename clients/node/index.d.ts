// Types of redis-ratelimit-module: the client of the redis-ratelimit module.

/** What every limiter command answers, typed; times in seconds. */
export interface RateLimit {
  /** Admitted (and counted); false: refused, and not counted. */
  allowed: boolean;
  /** The most admitted at once. */
  limit: number;
  /** How much more would be admitted right now. */
  remaining: number;
  /** Seconds until a refused request fits; null if admitted or never. */
  retryAfter: number | null;
  /** Seconds until the limiter is back to full capacity. */
  resetAfter: number;
  /** With `delay`: seconds to wait before going ahead (0: at once, or refused). */
  wait: number;
  /** With `atMost`: the quantity granted (0 when refused); else null. */
  granted: number | null;
  /** Several limiters: each one's own result, in order (else empty). */
  each: RateLimit[];
  /** Decided without the server, by `onError` (nothing counted, no fields to send). */
  failed: boolean;
  /** Refused, but let through in shadow mode (`allowed` is then true). */
  shadow: boolean;
  /** With a load gate: the level that shed the request (answer 503, not 429); else 0. */
  shedLevel: number;
  /** With a `slots` limiter (LEASE in RL.ALL): the lease's id, 0 when refused. */
  leaseId: number;
}

/** A limiter: its command, key, arguments, and its policy's name and window. */
export interface Limiter {
  command: "CL.THROTTLE" | "RL.WINDOW" | "RL.LOG" | "RL.ALL";
  inAll: "THROTTLE" | "WINDOW" | "LOG" | "LOAD" | "LEASE";
  key: string;
  name: string;
  args: (string | number)[];
  keywords: (string | number)[];
  windowSeconds: number;
  /** A load gate (`load()`): it limits no rate and has no HTTP fields of its own. */
  gate?: boolean;
}

/** A request's options (docs/options.md); at most one of delay, atMost, force. */
export interface CheckOptions {
  quantity?: number;
  refund?: boolean;
  /** Seconds a refusal keeps the key refused. */
  block?: number | null;
  /** Seconds a request that does not fit may wait for its turn. */
  delay?: number | null;
  atMost?: boolean;
  force?: boolean;
}

/** An ioredis Redis or Cluster, or a node-redis client or cluster. */
export type Client = object;

export function throttle(
  key: string,
  maxBurst: number,
  count: number,
  period: number,
  options?: { warmup?: number | null; name?: string },
): Limiter;
export function window(
  key: string,
  limit: number,
  seconds: number,
  options?: { algorithm?: string; name?: string },
): Limiter;
export function log(key: string, limit: number, seconds: number, options?: { name?: string }): Limiter;
/** A service's load gate (LOAD priority in RL.ALL); `priority` is critical_plus, critical,
 * sheddable_plus or sheddable (the default). */
export function load(key: string, priority?: string): Limiter;
/** A concurrency limit in RL.ALL (LEASE limit lease): `limit` leases of `seconds` at once. */
export function slots(key: string, limit: number, seconds: number, options?: { name?: string }): Limiter;

export function fromReply(
  reply: (number | string)[],
  options?: { each?: RateLimit[]; waitMs?: number; granted?: number | null },
): RateLimit;

export function headers(result: RateLimit, limiters: Limiter[], options?: { legacy?: boolean }): Record<string, string>;

export function commandSender(client: Client): (args: (string | number)[]) => Promise<unknown>;

export interface Lease {
  result: RateLimit;
  allowed: boolean;
  /** The lease's id; 0 when refused. */
  id: number;
}

/** RL.WINDOW.COUNTS: what a FIXED or SLIDING window counts; times in seconds. */
export interface WindowCounts {
  previous: number;
  previousEndsIn: number;
  current: number;
  currentEndsIn: number;
}

/** RL.LOG.COUNTS: what a log counts in its window; times in seconds. */
export interface LogCounts {
  count: number;
  oldestEndsIn: number;
  newestEndsIn: number;
}

/** What a client does when the server fails, and under a flood. */
export interface ResilienceOptions {
  /** The most a call waits, in ms (1000); it never waits on a reconnecting client's queue. */
  timeout?: number;
  /** When the server fails: "throw" (the default), "allow" (admit) or "deny" (refuse). */
  onError?: "throw" | "allow" | "deny";
  /** How long after a failure decisions are taken by onError without asking, in ms (1000). */
  cooldown?: number;
  /** Answers up to this many standing refusals locally (0: off, the default). */
  denyCache?: number;
  clock?: () => number;
  logger?: { error(message: string): void };
}

/** The server failed, or failed less than a cool-down ago; `retryAfter` in seconds. */
export class ServerUnavailable extends Error {
  retryAfter: number;
}

/** One of RL.TOP's keys: refused `refusals` times recently, overcounted by at most `error`. */
export interface TopKey {
  key: string;
  refusals: number;
  error: number;
}

export class RateLimiter {
  constructor(client: Client, options?: ResilienceOptions);
  /** RL.TOP, merged from every primary of a Cluster. */
  top(count?: number): Promise<TopKey[]>;
  check(limiters: Limiter[], options?: CheckOptions): Promise<RateLimit>;
  peek(limiters: Limiter[], options?: { quantity?: number }): Promise<RateLimit>;
  acquire(limiters: Limiter[], options?: { quantity?: number; timeout?: number }): Promise<RateLimit>;
  counts(limiter: Limiter): Promise<WindowCounts | LogCounts>;
  acquireLease(key: string, limit: number, lease: number, quantity?: number): Promise<Lease>;
  peekLease(key: string, limit: number, lease: number, quantity?: number): Promise<Lease>;
  releaseLease(key: string, id: number): Promise<boolean>;
  renewLease(key: string, id: number, lease: number): Promise<boolean>;
}

/** `{ list: { item: value } }`. */
export type Lists = Record<string, Record<string, string>>;

/**
 * Lists shared with the nginx package through one hash (fields `<list>:<item>`, and a
 * `version` every change increments); `read()` asks for the version at most once per `every`
 * seconds.
 */
export class SharedLists {
  constructor(client: Client, hash: string, options?: { every?: number; clock?: () => number });
  add(list: string, item: string, value?: string): Promise<void>;
  remove(list: string, item: string): Promise<void>;
  read(): Promise<Lists>;
}

/**
 * Quota leases for one hot limit: up to `batch` units taken in one call (AT_MOST) and spent
 * locally, what is unused after `hold` seconds given back (REFUND). In any window, N
 * processes admit at most N x batch more than the server alone would.
 */
export class Quota {
  constructor(
    limiter: RateLimiter,
    limiters: Limiter[],
    options?: { batch?: number; hold?: number; clock?: () => number },
  );
  /** Whether a request of `quantity` may go ahead. */
  take(quantity?: number): Promise<boolean>;
  /** Gives back whatever is held. */
  close(): Promise<void>;
  decisions: number;
  admitted: number;
  calls: number;
}

/** The one command for a request against `limiters` (the protocol, without I/O). */
export function commandFor(limiters: Limiter[], options: CheckOptions, readOnly?: boolean): (string | number)[];
/** The typed result of commandFor's reply. */
export function resultOf(reply: unknown[], limiters: Limiter[], options: CheckOptions): RateLimit;
export function leaseCommand(
  key: string,
  limit: number,
  lease: number,
  quantity?: number,
  readOnly?: boolean,
): (string | number)[];
export function releaseCommand(key: string, id: number): (string | number)[];
export function renewCommand(key: string, id: number, lease: number): (string | number)[];
export function leaseOf(reply: unknown[]): Lease;
export function addCommands(hash: string, list: string, item: string, value?: string): (string | number)[][];
export function removeCommands(hash: string, list: string, item: string): (string | number)[][];
export function countsCommand(limiter: Limiter): (string | number)[];
export function countsOf(limiter: Limiter, reply: unknown[]): WindowCounts | LogCounts;
export function topKeys(replies: unknown[][], count: number): TopKey[];
