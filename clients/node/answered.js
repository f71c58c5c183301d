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
"use strict";

const { AsyncLocalStorage } = require("node:async_hooks");

const current = new AsyncLocalStorage();

/** Runs `fn` with a fresh request watched; returns the request ({ own }). */
function watching(fn) {
  const request = { own: false };
  current.run(request, fn);
  return request;
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

module.exports = { countsForService, markOwn, watching };
