"""Shapes (b) and (h) of bench/overload.py: a Flask app under a threaded WSGI server, each
request burning CPU_MS of CPU, protected as docs/clients.md shows with every option at its
default:

    shedder = LoadShedder(redis.Redis(...), "load:svc")
    app.wsgi_app = LoadSheddingWSGI(app.wsgi_app, shedder)

or by the package's fixed limit (Flask-Limiter's place: one GCRA key at the capacity, checked
before the view), or by nothing. SERVER is waitress (its thread pool, its default of 4
threads: shape (b)) or gunicorn (one gthread worker of 4 threads: shape (h)); under
gunicorn the app, its client and its shedder are made in the worker, after the fork.

    python bench/shapes/flask_service.py PORT REDIS_URL MODE CPU_MS [CAPACITY [SERVER]]
"""

from __future__ import annotations

import json
import sys
import time

import redis
from flask import Flask

from ratelimit_module import RateLimiter, Throttle
from ratelimit_module.load import LoadShedder, LoadSheddingWSGI

port, url, mode, cpu_ms = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
capacity = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
server = sys.argv[6] if len(sys.argv) > 6 else "waitress"
THREADS = 4


def make_app() -> Flask:
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
    return app


if server == "gunicorn":
    from gunicorn.app.base import BaseApplication

    class Gunicorn(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            settings = {"bind": f"127.0.0.1:{port}", "workers": 1, "worker_class": "gthread",
                        "threads": THREADS, "backlog": 4096, "loglevel": "warning"}
            for name, value in settings.items():
                self.cfg.set(name, value)

        def load(self) -> Flask:
            return make_app()

    Gunicorn().run()
else:
    import waitress

    waitress.serve(make_app(), host="127.0.0.1", port=port, threads=THREADS, _quiet=True)
