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
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Optional


class Request:
    """One request a shedder let through: `own` once the package answered it by policy."""

    __slots__ = ("own",)

    def __init__(self) -> None:
        self.own = False


_CURRENT: ContextVar[Optional[Request]] = ContextVar("ratelimit_module_request", default=None)


@contextmanager
def watching() -> Iterator[Request]:
    """The request whose answer is watched while the block runs."""
    request = Request()
    token = _CURRENT.set(request)
    try:
        yield request
    finally:
        _CURRENT.reset(token)


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
