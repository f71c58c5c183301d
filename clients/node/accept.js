// How long a connection waits in the kernel's accept queue before Node takes it, measured by a
// connection of the shedder's own (docs/load.md, "Node"). Node takes one connection a turn of its
// event loop and leaves the rest in that queue, out of any middleware's sight; the time since the
// loop was last idle bounds their wait from above, but reads any loop kept busy (a closed loop of
// two clients) as a queue as old as the busy period. A probe connection waits in the same queue:
// its wait is the queue's, and while it waits its age is a lower bound of it.
"use strict";

const cluster = require("node:cluster");
const net = require("node:net");

// At most one probe in flight, and one sent at most every PROBE_EVERY seconds.
const PROBE_EVERY = 0.025;
// Connections the server took before the probe learnt its own port, kept to match it then.
const EARLY_KEPT = 64;

/** Whether a connection from `address` may be a probe sent to `host`. */
const fromHere = (address, host) =>
  address === host ||
  address === `::ffff:${host}` ||
  address === "::1" ||
  address?.startsWith("127.") ||
  address?.startsWith("::ffff:127.");

/** Where a probe reaches `server` (a listening net.Server): its own address, or loopback for a
 * wildcard one; null for a pipe, a server not listening, or a cluster's worker (whose connections
 * the primary process takes, so a probe may reach another worker). */
function probeTarget(server) {
  if (cluster.isWorker || typeof server?.address !== "function") return null;
  const address = server.address();
  if (address === null || typeof address !== "object" || !address.port) return null;
  const host = { "::": "::1", "0.0.0.0": "127.0.0.1" }[address.address] ?? address.address;
  return { host, port: address.port };
}

class AcceptProbe {
  /** Probes `server`; `clock` in seconds. Use `AcceptProbe.of`, which answers null where a probe
   * cannot work. */
  constructor(server, target, clock) {
    Object.assign(this, { server, target, clock });
    // The probe in flight: its socket, when it was sent, its local port once known.
    this.pending = null;
    this.early = new Map();
    this.sentAt = -Infinity;
    // The last probe's wait (s); 0 once the loop was seen idle after it.
    this.last = 0;
    this.lost = false;
    this.onConnection = (socket) => this.taken(socket);
    server.on("connection", this.onConnection);
  }

  static of(server, clock) {
    const target = probeTarget(server);
    return target === null ? null : new AcceptProbe(server, target, clock);
  }

  /** Sends a probe, unless one is in flight or one was sent less than PROBE_EVERY ago. */
  send() {
    const now = this.clock();
    if (this.lost || this.pending !== null || now - this.sentAt < PROBE_EVERY) return;
    const socket = net.connect(this.target);
    const pending = { socket, sentAt: now, port: undefined };
    this.pending = pending;
    this.sentAt = now;
    socket.on("error", () => this.drop(pending));
    socket.on("connect", () => {
      pending.port = socket.localPort;
      const early = this.early.get(pending.port);
      if (this.pending === pending && early !== undefined) this.resolve(early.socket, early.at);
    });
  }

  /** The server took `socket`: the probe's, if its port says so. */
  taken(socket) {
    const pending = this.pending;
    if (pending === null || !fromHere(socket.remoteAddress, this.target.host)) return;
    const now = this.clock();
    if (pending.port === undefined) {
      if (this.early.size < EARLY_KEPT) this.early.set(socket.remotePort, { socket, at: now });
    } else if (socket.remotePort === pending.port) {
      this.resolve(socket, now);
    }
  }

  resolve(socket, at) {
    this.last = Math.max(0, at - this.pending.sentAt);
    socket.destroy();
    this.drop(this.pending);
  }

  drop(pending) {
    if (this.pending !== pending) return;
    pending.socket.destroy();
    this.pending = null;
    this.early.clear();
  }

  /** The loop was idle at some moment since `since` (the watcher's last tick): nothing waited in
   * the queue then, and a probe sent before `since` and still not taken reached another process
   * (a cluster's, SO_REUSEPORT's, a proxy's): probing stops. */
  idle(since) {
    this.last = 0;
    if (this.pending !== null && this.pending.sentAt < since) {
      this.lost = true;
      this.drop(this.pending);
      this.server.off("connection", this.onConnection);
    }
  }

  /** How long a connection waits in the accept queue as last seen at `now`: the last probe's wait,
   * or, while one is in flight, at least its age; null once probing stopped. */
  wait(now) {
    if (this.lost) return null;
    return Math.max(this.last, this.pending === null ? 0 : now - this.pending.sentAt);
  }

  stop() {
    if (this.pending !== null) this.drop(this.pending);
    this.server.off("connection", this.onConnection);
  }
}

module.exports = { AcceptProbe, probeTarget };
