// One process of the quota-bound test: takes from one quota for a while and sends its
// parent when each admitted request went (ms). Arguments: key limit window batch seconds.
"use strict";

const { RateLimiter, Quota, log } = require("..");
const { ioredis } = require("./helpers");

(async () => {
  const [key, limit, windowSeconds, batch, seconds] = process.argv.slice(2);
  const client = ioredis();
  const quota = new Quota(new RateLimiter(client), [log(key, Number(limit), Number(windowSeconds))], {
    batch: Number(batch),
    hold: Number(windowSeconds),
  });
  const admitted = [];
  const end = Date.now() + Number(seconds) * 1000;
  while (Date.now() < end) {
    if (await quota.take()) admitted.push(Date.now());
    else await new Promise((resolve) => setTimeout(resolve, 2));
  }
  await quota.close();
  client.disconnect();
  process.send(admitted, () => process.exit(0));
})();
