"""Shape (b) of bench/overload.py: a Flask app under waitress' thread pool (its default of 4
threads), each request burning CPU_MS of CPU, protected as docs/clients.md shows with every
option at its default:

    shedder = LoadShedder(redis.Redis(...), "load:svc")
    app.wsgi_app = LoadSheddingWSGI(app.wsgi_app, shedder)

or by the package's fixed limit (Flask-Limiter's place: one GCRA key at the capacity, checked
before the view), or by nothing.

    python bench/shapes/flask_service.py PORT REDIS_URL MODE CPU_MS [CAPACITY]
"""

from __future__ import annotations

import json
import sys
import time

import redis
import waitress
from flask import Flask

from ratelimit_module import RateLimiter, Throttle
from ratelimit_module.load import LoadShedder, LoadSheddingWSGI

port, url, mode, cpu_ms = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
capacity = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
client = redis.Redis.from_url(url)
app = Flask(__name__)
shedder = LoadShedder(client, f"load:{port}") if mode == "shed" else None
limiter = RateLimiter(client) if mode == "fixed" else None
whole = [Throttle("bench:capacity", max(1, round(capacity) // 10), max(1, round(capacity)), 1)]


@app.route("/")
def home():  # type: ignore[no-untyped-def]
    if limiter is not None and not limiter.check(whole).allowed:
        return "Too Many Requests\n", 429
    until = time.thread_time() + cpu_ms / 1000
    while time.thread_time() < until:
        pass
    return "ok\n"


@app.route("/stats")
def stats():  # type: ignore[no-untyped-def]
    limit = shedder.limit if shedder is not None else None
    return json.dumps({"changes": limit.changes if limit else 0,
                       "congestions": limit.congestions if limit else 0})


if shedder is not None:
    app.wsgi_app = LoadSheddingWSGI(app.wsgi_app, shedder)  # type: ignore[method-assign]
waitress.serve(app, host="127.0.0.1", port=port, _quiet=True)
