"""Every call the package makes to the server, bounded by a deadline of its own: redis-py
waits forever by default, and retries a timed-out call as its `retry` says (redis-py 6 does
by default), so the client's own timeouts do not bound a call. `timeout=None` calls the client
directly, with only its own timeouts.

- `SyncCalls`: the call runs on a daemon worker thread (at most `workers`, started as
  needed) and the caller waits at most `timeout` seconds for it. A call given up on is
  never sent if it has not started, and its late reply is dropped.
- `AsyncCalls`: the call is awaited within `timeout` (`asyncio.wait_for`; redis-py drops the
  connection of a cancelled call).
- Both write several commands as one transaction (`MULTI`/`EXEC`) on the node that owns
  their key, Cluster or not: redis-py 5's Cluster pipelines have no transactions.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any, Callable, Optional, Sequence

import redis.asyncio
import redis.exceptions

DEFAULT_TIMEOUT = 1.0


class DeadlineExceeded(redis.exceptions.TimeoutError):
    """The server did not answer within the package's deadline (a server failure, as a
    redis-py timeout is)."""


def _node_client(client: Any, key: str) -> Any:
    """The plain client of the node that owns `key` (the client itself outside a Cluster)."""
    if not hasattr(client, "get_node_from_key"):
        return client
    return client.get_redis_connection(client.get_node_from_key(key))


def _run_transaction(client: Any, key: str, commands: Sequence[Sequence[Any]]) -> list:
    pipe = _node_client(client, key).pipeline(transaction=True)
    for command in commands:
        pipe.execute_command(*command)
    return pipe.execute()


class _Job:
    """A call for a worker, and where its answer goes: the calling thread's own queue, with
    the call's number (a late answer to a call given up on is told apart and dropped)."""

    __slots__ = ("call", "answers", "number", "abandoned")

    def __init__(self, call: Callable[[], Any], answers: queue.SimpleQueue, number: int) -> None:
        self.call, self.answers, self.number = call, answers, number
        self.abandoned = False


class SyncCalls:
    """A sync redis-py client's calls, each answered within `timeout` seconds or raising
    `DeadlineExceeded`."""

    def __init__(self, client: Any, timeout: Optional[float] = DEFAULT_TIMEOUT, workers: int = 16):
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout is more than 0 seconds, or None")
        self.client, self.timeout, self.workers = client, timeout, workers
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = self._idle = 0
        self._local = threading.local()

    def __call__(self, *args: Any, **options: Any) -> Any:
        """One command (`options` as redis-py's `execute_command` takes them)."""
        if self.timeout is None:
            return self.client.execute_command(*args, **options)
        return self._within(lambda: self.client.execute_command(*args, **options))

    def transaction(self, key: str, commands: Sequence[Sequence[Any]]) -> list:
        """Several commands on `key`'s node, all or none (`MULTI`/`EXEC`)."""
        if self.timeout is None:
            return _run_transaction(self.client, key, commands)
        return self._within(lambda: _run_transaction(self.client, key, commands))

    def _within(self, call: Callable[[], Any]) -> Any:
        local = self._local
        answers = getattr(local, "answers", None)
        if answers is None:
            answers = local.answers = queue.SimpleQueue()
            local.number = 0
        local.number += 1
        job = _Job(call, answers, local.number)
        # `_idle`: the workers waiting less the jobs queued for them (below 0 when every
        # worker is busy and the pool is full: the job waits its turn, or its deadline).
        with self._lock:
            start = self._idle <= 0 and self._threads < self.workers
            if start:
                self._threads += 1
            else:
                self._idle -= 1
        if start:
            threading.Thread(target=self._work, name="ratelimit-call", daemon=True).start()
        self._jobs.put(job)
        deadline = time.monotonic() + self.timeout  # type: ignore[operator]
        while True:
            try:
                number, reply, error = answers.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                job.abandoned = True
                raise DeadlineExceeded(f"no answer within {self.timeout} s") from None
            if number == job.number:
                break
        if error is not None:
            raise error
        return reply

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if not job.abandoned:
                try:
                    job.answers.put((job.number, job.call(), None))
                except BaseException as error:  # handed to the caller, raised there
                    job.answers.put((job.number, None, error))
            with self._lock:
                self._idle += 1


class AsyncCalls:
    """A `redis.asyncio` client's calls, each answered within `timeout` seconds or raising
    `DeadlineExceeded`."""

    def __init__(self, client: Any, timeout: Optional[float] = DEFAULT_TIMEOUT):
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout is more than 0 seconds, or None")
        self.client, self.timeout = client, timeout

    async def __call__(self, *args: Any, **options: Any) -> Any:
        return await self._within(self.client.execute_command(*args, **options))

    async def transaction(self, key: str, commands: Sequence[Sequence[Any]]) -> list:
        return await self._within(self._transaction(key, commands))

    async def _transaction(self, key: str, commands: Sequence[Sequence[Any]]) -> list:
        client = self.client
        if hasattr(client, "get_node_from_key"):
            # The async Cluster client has neither transactions nor a client per node: a
            # short-lived plain client to the owner (lists change rarely).
            node = client.get_node_from_key(key)
            direct = redis.asyncio.Redis(host=node.host, port=node.port, **_auth(node))
            try:
                return await _pipelined(direct, commands)
            finally:
                close = getattr(direct, "aclose", None) or direct.close
                await close()
        return await _pipelined(client, commands)

    async def _within(self, call: Any) -> Any:
        if self.timeout is None:
            return await call
        try:
            return await asyncio.wait_for(call, self.timeout)
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"no answer within {self.timeout} s") from None


async def _pipelined(client: Any, commands: Sequence[Sequence[Any]]) -> list:
    pipe = client.pipeline(transaction=True)
    for command in commands:
        pipe.execute_command(*command)
    return await pipe.execute()


def _auth(node: Any) -> dict:
    """What a plain client needs of a Cluster node's connection settings to reach it."""
    kwargs = getattr(node, "connection_kwargs", {})
    wanted = (
        "username",
        "password",
        "ssl",
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
        "socket_timeout",
        "socket_connect_timeout",
    )
    return {name: kwargs[name] for name in wanted if name in kwargs}
