"""A Flask app for the framework tests: Flask-Limiter on the `limits` storage. REDIS_URL
names the server, STRATEGY the strategy, PORT where to listen; with SWALLOW set,
Flask-Limiter lets a request through when the storage fails (its own `swallow_errors`),
each call bounded by 0.2 s."""

from __future__ import annotations

import os

from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

import ratelimit_module.limits_storage  # noqa: F401  (registers ratelimit://)
from ratelimit_module.metrics import PrometheusMetrics

app = Flask(__name__)
METRICS = PrometheusMetrics()
SWALLOW = bool(os.environ.get("SWALLOW"))
limiter = Limiter(
    get_remote_address,
    app=app,
    storage_uri=os.environ["REDIS_URL"].replace("redis://", "ratelimit://", 1),
    strategy=os.environ.get("STRATEGY", "moving-window"),
    headers_enabled=True,
    swallow_errors=SWALLOW,
    storage_options={
        "metrics": METRICS,
        **({"socket_timeout": 0.2, "socket_connect_timeout": 0.2} if SWALLOW else {}),
    },
)


@app.route("/limited")
@limiter.limit("5 per minute")
def limited() -> str:
    return "ok"


@app.route("/metrics")
@limiter.exempt
def metrics() -> tuple:
    return generate_latest(), 200, {"Content-Type": CONTENT_TYPE_LATEST}


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(os.environ["PORT"]), threaded=True)
