import type { Client } from "./index";

/**
 * A @nestjs/throttler ThrottlerStorage counting as the throttler's own storage (a log of
 * hits, a block after which the hits start again, a reset from the first hit): one call per
 * request.
 */
export class RateLimitModuleThrottlerStorage {
  constructor(
    client: Client,
    options?: {
      algorithm?: "LOG" | "SLIDING" | "FIXED";
      prefix?: string;
      /** ms a call waits at most (1000). */
      timeout?: number;
      /** When the server fails: "throw" (a 500), "allow", or "deny" (503). */
      onError?: "throw" | "allow" | "deny";
      /** ms after a failure without asking the server (1000). */
      cooldown?: number;
      logger?: { error(message: string): void };
    },
  );
  increment(
    key: string,
    ttl: number,
    limit: number,
    blockDuration: number,
    throttlerName: string,
  ): Promise<{
    totalHits: number;
    timeToExpire: number;
    isBlocked: boolean;
    timeToBlockExpire: number;
  }>;
}

/** ThrottlerGuard, adding Retry-After to the storage's 503 (onError "deny"). */
export const RateLimitModuleThrottlerGuard: typeof import("@nestjs/throttler").ThrottlerGuard;
