import type { Client } from "./index";

/** A @nestjs/throttler ThrottlerStorage: one call per request, with BLOCK for the block duration. */
export class RateLimitModuleThrottlerStorage {
  constructor(client: Client, options?: { algorithm?: "FIXED" | "SLIDING" | "LOG"; prefix?: string });
  increment(key: string, ttl: number, limit: number, blockDuration: number, throttlerName: string): Promise<{
    totalHits: number;
    timeToExpire: number;
    isBlocked: boolean;
    timeToBlockExpire: number;
  }>;
}
