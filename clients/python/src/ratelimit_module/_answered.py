"""Whose answer a response is: the service's, or the package's own.

A load shedder counts the responses it lets through as the service's health (latency, 5xx,
successes). The package's own answers say nothing of it: a limit's refusal (429, whoever
made it), and the 5xx its failure policy makes while the server fails (an error raised, or
a 503 under "deny") or a load gate's shed. Counted, a server outage would read as the
service failing, raise the fleet's level and shed the service once the server is back.

The shedder opens a `Request` around the call it lets through (`watching`); whatever in the
package refuses by policy or sheds within that call marks it (`mark_own`). A context
variable carries it, so the mark crosses awaits, threads' own contexts and the tasks a
framework starts for the call (they copy the context, and so share the one `Request`).

The same `Request` carries what the shedder does while the request waits on the rate-limit
server (`waiting_on_server`): the request leaves the requests in flight until the answer
comes (a frozen server's timeout is not the service's concurrency, and counted, a service
whose requests wait on it would refuse its other routes).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, Optional


class Request:
    """One request a shedder let through: `own` once the package answered it by policy;
    `waits`, what the shedder does as it begins (True) and ends (False) a wait on the
    rate-limit server, if anything."""

    __slots__ = ("own", "waits")

    def __init__(self, waits: Optional[Callable[[bool], None]] = None) -> None:
        self.own = False
        self.waits = waits


_CURRENT: ContextVar[Optional[Request]] = ContextVar("ratelimit_module_request", default=None)


@contextmanager
def watching(waits: Optional[Callable[[bool], None]] = None) -> Iterator[Request]:
    """The request whose answer is watched while the block runs; `waits` is called with True
    as it begins a wait on the rate-limit server and False as the wait ends."""
    request = Request(waits)
    token = _CURRENT.set(request)
    try:
        yield request
    finally:
        _CURRENT.reset(token)


@contextmanager
def waiting_on_server() -> Iterator[None]:
    """The block waits on the rate-limit server: the current request's shedder is told as it
    begins and ends (nothing outside a watched request)."""
    request = _CURRENT.get()
    waits = None if request is None else request.waits
    if waits is None:
        yield
        return
    waits(True)
    try:
        yield
    finally:
        waits(False)


def mark_own() -> None:
    """The package answers the current request by its policy (a failure policy's refusal or
    error, a load gate's shed): not the service's answer."""
    request = _CURRENT.get()
    if request is not None:
        request.own = True


def counts_for_service(status: int, own: bool) -> bool:
    """Whether a response with HTTP `status` says anything about the service: not a limit's
    refusal (429), and not a 5xx the package made by its policy (`own`)."""
    return status != 429 and not (own and status >= 500)
