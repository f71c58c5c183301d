import type { Client } from "./index";

/** An express-rate-limit Store: one call per request; a refused request counts nothing. */
export class RateLimitModuleStore {
  constructor(options: { client: Client; algorithm?: "FIXED" | "SLIDING" | "LOG"; prefix?: string });
  localKeys: boolean;
  prefix: string;
  init(options: { windowMs: number; limit: unknown }): void;
  increment(key: string): Promise<{ totalHits: number; resetTime: Date }>;
  get(key: string): Promise<{ totalHits: number; resetTime: Date }>;
  decrement(key: string): Promise<void>;
  resetKey(key: string): Promise<void>;
}
