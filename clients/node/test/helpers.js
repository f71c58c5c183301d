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

/** Listens on a free port; resolves with the server and its base URL. */
function listen(app) {
  return new Promise((resolve) => {
    const server = app.listen(0, "127.0.0.1", () => {
      resolve({ server, base: `http://127.0.0.1:${server.address().port}` });
    });
  });
}

module.exports = { url, ioredis, burst, counted, listen };
