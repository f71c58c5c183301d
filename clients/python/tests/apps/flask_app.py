"""A Flask app for the framework tests: Flask-Limiter on the `limits` storage. REDIS_URL
names the server, STRATEGY the strategy, PORT where to listen; with SWALLOW set,
Flask-Limiter lets a request through when the storage fails (its own `swallow_errors`),
each call bounded by 0.2 s."""

from __future__ import annotations

import os

from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

import ratelimit_module.limits_storage  # noqa: F401  (registers ratelimit://)

app = Flask(__name__)
SWALLOW = bool(os.environ.get("SWALLOW"))
limiter = Limiter(get_remote_address, app=app,
                  storage_uri=os.environ["REDIS_URL"].replace("redis://", "ratelimit://", 1),
                  strategy=os.environ.get("STRATEGY", "moving-window"), headers_enabled=True,
                  swallow_errors=SWALLOW,
                  storage_options={"socket_timeout": 0.2, "socket_connect_timeout": 0.2}
                  if SWALLOW else {})


@app.route("/limited")
@limiter.limit("5 per minute")
def limited() -> str:
    return "ok"


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(os.environ["PORT"]), threaded=True)
