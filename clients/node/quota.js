// Quota leases for one hot limit: a process takes up to `batch` of a limit in one call
// (AT_MOST) and spends it locally, so that one key's decisions are not bounded by one
// shard's thread and a round trip each. What is unused `hold` seconds after it was taken is
// given back (REFUND); close() gives back the rest.
//
// The bound: in any window, what N processes admit exceeds what the server alone would
// admit by at most N x batch (each holds at most `batch` taken earlier; every unit it spends
// was counted by the server when taken). `batch: 1` is one call per decision, as check().
//
// While the limit binds, a lease stays batched. A take that gets less than it asked for (the
// units that refilled since the last call) marks the limit as binding; from then on a take
// asks for half a batch at once, waiting for it on the server (DELAY, up to `hold`): the
// server answers when it fits, and the process spends it from then, refusing without asking
// until then. So a binding limit costs at most one call per half batch admitted, and a
// refusal (half a batch does not fit within `hold`) one call per retry_after, not one per
// request. A take that finds half a batch there at once asks for a whole batch again
// (AT_MOST). Half a batch is at most the smallest limit of `limiters`.
//
//     const quota = new Quota(limiter, [window("api:global", 10000, 1)], { batch: 50, hold: 0.5 });
//     if (await quota.take()) { ... }
"use strict";

/** The most a limiter spec admits at once, if it says. */
function capacity(limiter) {
  if (limiter.inAll === "THROTTLE") return limiter.args[0] + 1;
  return limiter.inAll === "WINDOW" || limiter.inAll === "LOG" ? limiter.args[0] : null;
}

class Quota {
  /**
   * @param {import("./index").RateLimiter} limiter
   * @param {object[]} limiters  taken all or nothing, as one check()
   * @param {{ batch?: number, hold?: number, clock?: () => number }} [options]  hold in seconds
   */
  constructor(limiter, limiters, { batch = 1, hold = 1, clock = Date.now } = {}) {
    if (!(batch >= 1) || !(hold > 0)) throw new RangeError("batch is at least 1 and hold more than 0 seconds");
    Object.assign(this, { limiter, limiters, batch, hold, clock });
    // What a take asks for while the limit binds: half a batch, at most the least limit.
    const limits = limiters.map(capacity).filter((limit) => limit !== null);
    this.half = Math.min(Math.ceil(batch / 2), ...limits);
    this.held = 0;
    this.expiresAt = null;
    // What is held may be spent from then on (a take the server made wait; the clock's ms).
    this.availableAt = -Infinity;
    this.timer = null;
    // Refused by the server: no call before then (the clock's ms).
    this.refusedUntil = -Infinity;
    // The last take got less than it asked for: ask for half a batch and wait for it.
    this.binding = false;
    // Decisions taken, units admitted, calls to the server: what a lease saves.
    this.decisions = 0;
    this.admitted = 0;
    this.calls = 0;
    this.queue = Promise.resolve();
  }

  /** Whether a request of `quantity` may go ahead: from what is held, or after taking up to
   * `batch` more in one call. */
  take(quantity = 1) {
    return this.serialized(() => this.takeNow(quantity));
  }

  /** Gives back whatever is held. */
  close() {
    return this.serialized(async () => {
      clearTimeout(this.timer);
      this.timer = null;
      await this.giveBack(this.release());
    });
  }

  // One take or give-back at a time: the calls of one process queue behind each other.
  serialized(step) {
    const run = this.queue.then(step);
    this.queue = run.catch(() => {});
    return run;
  }

  async takeNow(quantity) {
    this.decisions += 1;
    await this.giveBack(this.expired());
    if (this.spend(quantity)) {
      this.limiter.count(this.limiters.map((one) => one.name).join("+"), "quota");
      return true;
    }
    const now = this.clock();
    if (now < this.refusedUntil || (this.held > 0 && now < this.availableAt)) return false;
    const binding = this.binding;
    // Enough to hold a batch (or `quantity`), taking what fits; while the limit binds, half
    // a batch (no more than holds a batch, or what `quantity` lacks) at once, waiting for it
    // up to `hold`.
    const asked = binding
      ? Math.max(Math.min(this.half, this.batch - this.held), quantity - this.held)
      : Math.max(this.batch, quantity) - this.held;
    const how = binding ? { delay: this.hold } : { atMost: true };
    const result = await this.limiter.check(this.limiters, { quantity: asked, ...how });
    this.calls += 1;
    if (result.failed) return result.allowed; // decided by onError: nothing taken
    if (!result.allowed) {
      // Nothing taken; it says when what was asked fits (null: never, at this size).
      if (result.retryAfter !== null) this.refusedUntil = this.clock() + result.retryAfter * 1000;
      this.binding = this.batch > 1;
    } else if (binding) {
      // Half a batch was there at once: the limit may no longer bind.
      this.binding = result.wait > 0;
      this.add(asked, result.wait);
    } else {
      this.binding = this.batch > 1 && result.granted < asked;
      this.add(result.granted, 0);
    }
    return this.spend(quantity);
  }

  add(units, wait) {
    if (units <= 0) return;
    const now = this.clock();
    this.availableAt = now + wait * 1000;
    if (this.held === 0) this.expiresAt = now + (wait + this.hold) * 1000;
    this.held += units;
    this.arm();
  }

  spend(quantity) {
    if (this.held < quantity || this.clock() < this.availableAt) return false;
    this.held -= quantity;
    this.admitted += quantity;
    return true;
  }

  expired() {
    return this.held > 0 && this.clock() >= this.expiresAt ? this.release() : 0;
  }

  release() {
    const units = this.held;
    this.held = 0;
    this.expiresAt = null;
    return units;
  }

  async giveBack(units) {
    if (units > 0) await this.limiter.check(this.limiters, { quantity: units, refund: true });
  }

  // Gives back at the hold's end even if no request comes to notice it.
  arm() {
    if (this.timer || this.held === 0) return;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.serialized(async () => {
          await this.giveBack(this.expired());
          this.arm();
        }).catch(() => {});
      },
      Math.max(0, this.expiresAt - this.clock()),
    );
    this.timer.unref?.();
  }
}

module.exports = { Quota };
