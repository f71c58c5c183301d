// Quota leases for one hot limit: a process takes up to `batch` of a limit in one call
// (AT_MOST) and spends it locally, so that one key's decisions are not bounded by one
// shard's thread and a round trip each. What is unused `hold` seconds after it was taken is
// given back (REFUND); close() gives back the rest.
//
// The bound: in any window, what N processes admit exceeds what the server alone would
// admit by at most N x batch (each holds at most `batch` taken earlier; every unit it spends
// was counted by the server when taken). `batch: 1` is one call per decision, as check().
//
// While the limit binds, a take that gets nothing learns when one unit fits (retry_after):
// until then take() refuses without asking, so a refused quota costs the server one call
// per retry_after, not one per request.
//
//     const quota = new Quota(limiter, [window("api:global", 10000, 1)], { batch: 50, hold: 0.5 });
//     if (await quota.take()) { ... }
"use strict";

class Quota {
  /**
   * @param {import("./index").RateLimiter} limiter
   * @param {object[]} limiters  taken all or nothing, as one check()
   * @param {{ batch?: number, hold?: number, clock?: () => number }} [options]  hold in seconds
   */
  constructor(limiter, limiters, { batch = 1, hold = 1, clock = Date.now } = {}) {
    if (!(batch >= 1) || !(hold > 0)) throw new RangeError("batch is at least 1 and hold more than 0 seconds");
    Object.assign(this, { limiter, limiters, batch, hold, clock });
    this.held = 0;
    this.expiresAt = null;
    this.timer = null;
    // Refused by the server: no call before then (the clock's ms).
    this.refusedUntil = -Infinity;
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
    if (this.clock() < this.refusedUntil) return false;
    const wanted = Math.max(this.batch, quantity) - this.held;
    const result = await this.limiter.check(this.limiters, { quantity: wanted, atMost: true });
    this.calls += 1;
    if (result.failed) return result.allowed; // decided by onError: nothing taken
    if (!result.allowed && result.retryAfter !== null) {
      this.refusedUntil = this.clock() + result.retryAfter * 1000;
    }
    if (result.granted > 0) {
      if (this.held === 0) this.expiresAt = this.clock() + this.hold * 1000;
      this.held += result.granted;
      this.arm();
    }
    return this.spend(quantity);
  }

  spend(quantity) {
    if (this.held < quantity) return false;
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
