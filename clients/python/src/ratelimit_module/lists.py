"""Lists shared by every gateway and application through one Redis hash: fields
`<list>:<item>` (an allow list of callers, a deny list of keys, thresholds...) and a `version`
field that every change increments. The nginx package (`resty.ratelimit_module.lists`)
reads and writes the same hash, so a deny list written here reaches every gateway.

A change writes its item and increments the version in one transaction (`MULTI`/`EXEC` on
the node that owns the hash, Cluster or not), so no reader sees one without the other; every
call waits at most `timeout` seconds (1 by default), as the limiters' do.

A reader keeps a copy and asks only for the version, at most once per `every` seconds; it
reads the hash again when the version changed. A change increments the version after
writing its item, so a reader that saw the new version reads the new item.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Optional

from ._calls import DEFAULT_TIMEOUT, AsyncCalls, SyncCalls

Lists = Dict[str, Dict[str, str]]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse(flat: Dict[Any, Any]) -> Lists:
    """`{list: {item: value}}` from a hash's fields (`version` and fields without `:` are
    not lists)."""
    lists: Lists = {}
    for field, value in flat.items():
        name, colon, item = _text(field).partition(":")
        if colon:
            lists.setdefault(name, {})[item] = _text(value)
    return lists


def add_commands(hash: str, list: str, item: str, value: str) -> list:
    """The transaction that sets `item` of `list` (as the nginx package writes it)."""
    return [["HSET", hash, f"{list}:{item}", value], ["HINCRBY", hash, "version", 1]]


def remove_commands(hash: str, list: str, item: str) -> list:
    """The transaction that removes `item` from `list`."""
    return [["HDEL", hash, f"{list}:{item}"], ["HINCRBY", hash, "version", 1]]


class _Copy:
    """The last copy read, and when to ask for the version again."""

    def __init__(self, every: float, clock: Callable[[], float]):
        self.every, self.clock = every, clock
        self.lists: Lists = {}
        self.version: Optional[str] = None
        self.next_check = float("-inf")

    def due(self) -> bool:
        return self.clock() >= self.next_check

    def checked(self) -> None:
        self.next_check = self.clock() + self.every


class SharedLists:
    """One hash of shared lists on a redis-py client (`Redis` or `RedisCluster`).

    lists = SharedLists(client, "gateway:lists")
    lists.add("deny", "203.0.113.7")
    if "203.0.113.7" in lists.read().get("deny", {}): ...
    """

    def __init__(
        self,
        client: Any,
        hash: str,
        every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
    ):
        self.client, self.hash = client, hash
        self.call = SyncCalls(client, timeout)
        self._copy = _Copy(every, clock)

    def add(self, list: str, item: str, value: str = "1") -> None:
        """Sets `item` of `list` to `value` and increments the version, in one transaction."""
        self.call.transaction(self.hash, add_commands(self.hash, list, item, value))

    def remove(self, list: str, item: str) -> None:
        """Removes `item` from `list` and increments the version, in one transaction."""
        self.call.transaction(self.hash, remove_commands(self.hash, list, item))

    def read(self) -> Lists:
        """The lists, `{list: {item: value}}`: the copy, checked against the version at most
        once per `every` seconds and read again when it changed."""
        copy = self._copy
        if copy.due():
            version = self.call("HGET", self.hash, "version")
            if copy.version is None or version != copy.version:
                copy.lists = parse(self.call("HGETALL", self.hash) or {})
                copy.version = version
            copy.checked()
        return copy.lists


class AsyncSharedLists:
    """`SharedLists` on a `redis.asyncio` client, awaited."""

    def __init__(
        self,
        client: Any,
        hash: str,
        every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
    ):
        self.client, self.hash = client, hash
        self.call = AsyncCalls(client, timeout)
        self._copy = _Copy(every, clock)

    async def add(self, list: str, item: str, value: str = "1") -> None:
        await self.call.transaction(self.hash, add_commands(self.hash, list, item, value))

    async def remove(self, list: str, item: str) -> None:
        await self.call.transaction(self.hash, remove_commands(self.hash, list, item))

    async def read(self) -> Lists:
        copy = self._copy
        if copy.due():
            version = await self.call("HGET", self.hash, "version")
            if copy.version is None or version != copy.version:
                flat = await self.call("HGETALL", self.hash)
                copy.lists, copy.version = parse(flat or {}), version
            copy.checked()
        return copy.lists
