"""A pytest plugin that runs `limits`' own storage and strategy tests (from its source
distribution, which `make test` downloads, pinned, into target/) against this package's
storage instead of the servers of limits' docker-compose: every storage parameter of
limits' tests becomes `ratelimit://` (sync) or `async+ratelimit://` (async) on the server at
REDIS_URL. limits' conftest.py, which starts docker containers, is left out
(`--noconftest`). limits' tests sleep on the real clock and a few straddle a window's end
now and then (limits marks some `flaky`); pytest-rerunfailures runs a failed one again, so a
test passes only when it passes whole.

    cd target/framework-tests/limits-5.8.0
    REDIS_URL=redis://127.0.0.1:6379 python -m pytest --noconftest -p limits_suite \
        --reruns 2 -k ratelimit tests/test_storage.py tests/test_strategy.py tests/aio/...
"""

from __future__ import annotations

import os

import pytest
import redis
import tests.utils as suite
from pytest_lazy_fixtures import lf

import ratelimit_module.limits_storage  # noqa: F401  (registers ratelimit://)

URL = os.environ["REDIS_URL"]
SYNC = pytest.param(
    URL.replace("redis://", "ratelimit://", 1), {}, lf("ratelimit_server"), id="ratelimit"
)
ASYNC = pytest.param(
    URL.replace("redis://", "async+ratelimit://", 1),
    {},
    lf("ratelimit_server"),
    id="async-ratelimit",
)

# The test modules import these from tests.utils when collected, after this plugin loads.
suite.ALL_STORAGES = {"ratelimit": SYNC}
suite.ALL_STORAGES_ASYNC = {"ratelimit": ASYNC}
for name in ("all_storage", "moving_window_storage", "sliding_window_counter_storage"):
    setattr(suite, name, pytest.mark.parametrize("uri, args, fixture", [SYNC]))
for name in (
    "async_all_storage",
    "async_moving_window_storage",
    "async_sliding_window_counter_storage",
):
    setattr(suite, name, pytest.mark.parametrize("uri, args, fixture", [ASYNC]))


@pytest.fixture
def ratelimit_server():
    """The server, emptied before each test, as limits' fixtures empty theirs."""
    client = redis.Redis.from_url(URL)
    client.flushall()
    yield client
    client.close()


# limits' test that the sliding-window counter floors the previous window's weighted share
# (`floor(previous * overlap / window) + current + cost <= limit`); the module weighs that
# share exactly, so it refuses the request this test expects admitted at a fractional share.
# Deliberate: the module never admits beyond the weighted estimate (docs/clients.md).
FLOORS_THE_PREVIOUS_SHARE = "test_sliding_window_counter_previous_window"


def pytest_collection_modifyitems(config, items):
    kept, left_out = [], []
    for item in items:
        (left_out if item.name.startswith(FLOORS_THE_PREVIOUS_SHARE) else kept).append(item)
    if left_out:
        print(
            f"\nleft out, as the module weighs the previous window exactly: "
            f"{', '.join(item.nodeid for item in left_out)}"
        )
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
