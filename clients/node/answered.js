// Whose answer a response is: the service's, or the package's own. A load shedder counts the
// responses it lets through as the service's health (latency, 5xx, successes); the package's
// own answers say nothing of it: a limit's refusal (429, whoever made it), and the 5xx its
// failure policy makes while the server fails (an error thrown, or a 503 under "deny") or a
// load gate's shed. Counted, a server outage would read as the service failing, raise the
// fleet's level and shed the service once the server is back.
//
// The shedder runs the rest of the request inside `watching`; whatever in the package
// refuses by policy or sheds within it marks the request (`markOwn`). An AsyncLocalStorage
// carries it through every callback and promise the request's handling makes.
//
// The same request carries what the shedder does while it waits on the rate-limit server
// (`waitingOnServer`): it leaves the requests in flight until the answer comes (a frozen
// server's timeout is not the service's concurrency, and counted, a service whose requests wait
// on it would refuse its other routes).
"use strict";

const { AsyncLocalStorage } = require("node:async_hooks");

const current = new AsyncLocalStorage();

/** Runs `fn` with a fresh request watched; returns the request ({ own }). `waits` is called with
 * true as the request begins a wait on the rate-limit server and false as the wait ends. */
function watching(fn, waits = null) {
  const request = { own: false, waits };
  current.run(request, fn);
  return request;
}

/** `call()`'s promise, the current request's shedder told as its wait on the rate-limit server
 * begins and ends (nothing outside a watched request). */
function waitingOnServer(call) {
  const waits = current.getStore()?.waits;
  if (!waits) return call();
  waits(true);
  return call().finally(() => waits(false));
}

/** The package answers the current request by its policy: not the service's answer. */
function markOwn() {
  const request = current.getStore();
  if (request) request.own = true;
}

/** Whether a response with HTTP `status` says anything about the service: not a limit's
 * refusal (429), and not a 5xx the package made by its policy (`own`). */
function countsForService(status, own) {
  return status !== 429 && !(own && status >= 500);
}

module.exports = { countsForService, markOwn, waitingOnServer, watching };
