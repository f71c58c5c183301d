// What the tests share: the server (REDIS_URL, a live server with the module) and an HTTP
// burst against a local app.
"use strict";

const Redis = require("ioredis");

const url = process.env.REDIS_URL;
if (!url) throw new Error("REDIS_URL must name a server with the module");

function ioredis() {
  return new Redis(url);
}

/** `count` GET requests to `target` at once: their statuses and headers. */
async function burst(target, count) {
  const responses = await Promise.all(Array.from({ length: count }, () => fetch(target)));
  return Promise.all(
    responses.map(async (response) => {
      await response.text();
      return { status: response.status, headers: response.headers };
    }),
  );
}

/** How many of `responses` have `status`. */
const counted = (responses, status) => responses.filter((one) => one.status === status).length;

/** Listens on a free port; resolves with the server, its base URL and `settled`.
 *
 * express-rate-limit decrements a store on a response's "finish", after the client may have
 * read it: `settled()` resolves once every response the server began has closed and every
 * decrement asked of `stores` has finished, so that a test waits for those rather than for a
 * time. It rejects if they have not within `seconds`. */
function listen(app, ...stores) {
  let open = 0;
  const decrements = new Set();
  for (const store of stores) {
    const decrement = store.decrement.bind(store);
    store.decrement = (key) => {
      const done = Promise.resolve(decrement(key));
      decrements.add(done);
      const forget = () => decrements.delete(done);
      done.then(forget, forget);
      return done;
    };
  }
  const settled = async (seconds = 10) => {
    const end = Date.now() + seconds * 1000;
    while (open > 0 || decrements.size > 0) {
      if (Date.now() > end) throw new Error(`${open} responses open, ${decrements.size} decrements pending`);
      await new Promise((resolve) => setImmediate(resolve));
    }
  };
  return new Promise((resolve) => {
    const server = app.listen(0, "127.0.0.1", () => {
      resolve({ server, base: `http://127.0.0.1:${server.address().port}`, settled });
    });
    server.on("request", (request, response) => {
      open++;
      response.once("close", () => open--);
    });
  });
}

module.exports = { url, ioredis, burst, counted, listen };
