import type { Client } from "./index";

/**
 * An express-rate-limit Store. "ANCHORED" (the default) counts as express-rate-limit's own
 * stores (a window from the first hit, every hit counted); "FIXED", "SLIDING" and "LOG" let
 * the module decide (a refused request counts nothing).
 */
export class RateLimitModuleStore {
  constructor(options: {
    client: Client;
    algorithm?: "ANCHORED" | "FIXED" | "SLIDING" | "LOG";
    prefix?: string;
    /** ms a call waits at most (1000). */
    timeout?: number;
    /** When the server fails: "throw" (express-rate-limit's passOnStoreError decides), "allow", or "deny" (503 with Retry-After). */
    onError?: "throw" | "allow" | "deny";
    /** ms after a failure without asking the server (1000). */
    cooldown?: number;
    logger?: { error(message: string): void };
  });
  localKeys: boolean;
  prefix: string;
  init(options: { windowMs: number; limit: unknown; skipFailedRequests?: boolean }): void;
  increment(key: string): Promise<{ totalHits: number; resetTime: Date }>;
  get(key: string): Promise<{ totalHits: number; resetTime: Date } | undefined>;
  decrement(key: string): Promise<void>;
  resetKey(key: string): Promise<void>;
  resetAll(): Promise<void>;
}
