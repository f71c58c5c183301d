// An Express service as docs/clients.md sets it up, both middlewares at their defaults: load
// shedding on the whole app, express-rate-limit on the package's store on /limited, nothing on
// /open. REDIS_URL names the server, SERVICE the shedder's key, ON_ERROR the store's failure
// policy ("throw", the default, "deny" or "allow"), PORT the port. tests/clients.rs freezes the server
// under it: nothing may be shed once the server is back.
"use strict";

const express = require("express");
const Redis = require("ioredis");
const { rateLimit } = require("express-rate-limit");
const { RateLimitModuleStore } = require("../../express");
const { LoadShedder, loadShedding } = require("../../load");

const redis = new Redis(process.env.REDIS_URL);
redis.on("error", () => {});
const quiet = { error() {}, warn() {}, info() {} };
const app = express();
app.use(loadShedding(new LoadShedder(redis, process.env.SERVICE, { logger: quiet })));
const onError = process.env.ON_ERROR ?? "throw";
app.use(
  "/limited",
  rateLimit({
    windowMs: 60_000,
    limit: 6000,
    store: new RateLimitModuleStore({ client: redis, onError, logger: quiet }),
  }),
);
app.get("/limited", (req, res) => res.send("ok"));
app.get("/open", (req, res) => res.send("ok"));
// Express' own error handler answers 500 and logs; the test reads statuses only.
// eslint-disable-next-line no-unused-vars -- Express tells an error handler by its four parameters
app.use((error, req, res, next) => res.status(error.status ?? 500).send("error"));
app.listen(Number(process.env.PORT), "127.0.0.1");
