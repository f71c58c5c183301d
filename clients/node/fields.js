// The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11) of a result:
// RateLimit-Policy, RateLimit and, on a refusal, Retry-After; times rounded up to whole
// seconds, so a client that waits them is never early.
"use strict";

const { rateLimiters } = require("./protocol");

// Whole seconds, rounded up: a client that waits this long is never early.
const seconds = (value) => Math.ceil(value - 1e-9);

/**
 * The IETF fields (draft-ietf-httpapi-ratelimit-headers-11) for a result: RateLimit-Policy,
 * RateLimit and, when refused, Retry-After; with `legacy`, RateLimit-Limit, -Remaining, -Reset.
 */
function headers(result, allLimiters, { legacy = false } = {}) {
  const limiters = rateLimiters(allLimiters);
  const each = result.each.length > 0 ? result.each : [result];
  const fields = {
    "RateLimit-Policy": limiters
      .map((one, i) => `"${one.name}";q=${each[i].limit};w=${seconds(one.windowSeconds)}`)
      .join(", "),
    RateLimit: limiters
      .map((one, i) => `"${one.name}";r=${each[i].remaining};t=${seconds(each[i].resetAfter)}`)
      .join(", "),
  };
  if (!result.allowed && result.retryAfter !== null) fields["Retry-After"] = String(seconds(result.retryAfter));
  if (legacy) {
    fields["RateLimit-Limit"] = String(result.limit);
    fields["RateLimit-Remaining"] = String(result.remaining);
    fields["RateLimit-Reset"] = String(seconds(result.resetAfter));
  }
  return fields;
}

module.exports = { headers, seconds };
