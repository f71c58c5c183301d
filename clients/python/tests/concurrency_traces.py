"""Writes the `concurrency` part of clients/conformance.json: traces of the local limit
(docs/load.md, "The local limit"), arrivals and latencies in, decisions and the limit out,
which every package replays exactly.

Each trace is a serial service (one request served at a time, `service` µs each) under
arrivals drawn once here with a fixed seed; an admitted request finishes when the service
has served it, so its latency is its wait plus its service. The events and what the
reference implementation (ratelimit_module.concurrency) answered are stored: the table is the
specification's worked record, and a package that disagrees on any event fails.

    python clients/python/tests/concurrency_traces.py   # rewrites the part
"""

from __future__ import annotations

import heapq
import json
import random
from pathlib import Path

from ratelimit_module.concurrency import PRIORITIES, ConcurrencyLimit, LimitOptions

TABLE = Path(__file__).resolve().parents[2] / "conformance.json"
MIX = (0.10, 0.15, 0.15, 0.60)

# (name, what it shows, service µs, phases of (µs, offered load), options over the defaults,
# the arrivals' seed)
TRACES = (
    (
        "healthy",
        "half the capacity: nothing refused, the limit eases down towards twice the peak",
        4_500,
        ((1_200_000, 0.5),),
        {},
        51,
    ),
    (
        "overload",
        "half, three times, half the capacity: a deep queue begins congestion at once, "
        "the classes are refused from the least important, congestion ends after",
        4_500,
        ((400_000, 0.5), (800_000, 3.0), (600_000, 0.5)),
        {},
        52,
    ),
    (
        "long overload",
        "half, three times for two seconds, half the capacity: shedding keeps the queue short "
        "and the peak low, but what it refuses holds congestion until the overload ends",
        4_500,
        ((400_000, 0.5), (2_000_000, 3.0), (600_000, 0.5)),
        {},
        53,
    ),
    (
        "creeping",
        "a queue that stands but stays shallow begins congestion at the fourth "
        "standing interval; short epochs move the no-load latency",
        4_500,
        ((600_000, 0.5), (1_200_000, 1.0)),
        {"epoch_us": 400_000},
        51,
    ),
)
# An event loop: a request waits for the loop before it can be decided (its wait is the
# backlog it is decided with), and a refusal costs the loop REFUSAL µs.
EVENT_LOOP = (
    "event loop",
    "half, three times, half the capacity of one event loop: a request is decided when the "
    "loop reaches it, its wait the backlog; a refusal costs 300 µs of the loop",
    4_500,
    ((400_000, 0.5), (800_000, 3.0), (600_000, 0.5)),
    {},
    53,
)
REFUSAL = 300


def events_of(service: int, phases, seed: int) -> list[tuple[int, int, object]]:
    """Arrivals, each with a class, as (µs, 0, class index)."""
    draw = random.Random(seed)
    arrivals, start = [], 0
    for length, load in phases:
        at = float(start)
        while True:
            at += draw.expovariate(load / service)
            if at >= start + length:
                break
            pick, total, index = draw.random(), 0.0, 3
            for number, share in enumerate(MIX):
                total += share
                if pick < total:
                    index = number
                    break
            arrivals.append((int(at), 0, index))
        start += length
    return arrivals


def trace(name: str, about: str, service: int, phases, options: dict, seed: int) -> dict:
    limit = ConcurrencyLimit(LimitOptions(**options))
    queue = events_of(service, phases, seed)
    heapq.heapify(queue)
    free_at, events, expect = 0, [], []
    while queue:
        now, kind, value = heapq.heappop(queue)
        if kind == 0:
            admitted = limit.admit(value, now)
            events.append([now, "admit", PRIORITIES[value]])
            if admitted:
                free_at = max(now, free_at) + service
                heapq.heappush(queue, (free_at, 1, free_at - now))
            decision = admitted
        else:
            limit.finish(value, now)
            events.append([now, "finish", value])
            decision = None
        expect.append([decision, limit.limit, limit.congested])
    return {"name": name, "about": about, "options": options, "events": events, "expect": expect}


def event_loop_trace(name: str, about: str, service: int, phases, options: dict, seed: int) -> dict:
    limit = ConcurrencyLimit(LimitOptions(**options))
    free_at, events, expect = 0, [], []
    for at, _, index in events_of(service, phases, seed):
        start = max(at, free_at)
        admitted = limit.admit(index, start, start - at)
        events.append([start, "admit", PRIORITIES[index], start - at])
        expect.append([admitted, limit.limit, limit.congested])
        if admitted:
            free_at = start + service
            limit.finish(free_at - at, free_at)
            events.append([free_at, "finish", free_at - at])
            expect.append([None, limit.limit, limit.congested])
        else:
            free_at = start + REFUSAL
    return {"name": name, "about": about, "options": options, "events": events, "expect": expect}


def main() -> None:
    table = json.loads(TABLE.read_text())
    defaults = LimitOptions()
    table["concurrency"] = {
        "about": "The local limit (docs/load.md). Options over `defaults` (times in whole µs, "
        'shares most important first); events [µs, "admit", class] (or [µs, "admit", '
        'class, backlog µs]) or [µs, "finish", latency µs]; after each, [admitted or null, '
        "limit, congested].",
        "defaults": {
            "initial": defaults.initial,
            "floor": defaults.floor,
            "ceiling": defaults.ceiling,
            "interval_us": defaults.interval_us,
            "target_us": defaults.target_us,
            "enter": defaults.enter,
            "deep": defaults.deep,
            "epoch_us": defaults.epoch_us,
            "decay": defaults.decay,
            "shares": list(defaults.shares),
        },
        "traces": [trace(*spec) for spec in TRACES] + [event_loop_trace(*EVENT_LOOP)],
    }
    TABLE.write_text(dumps(table))


def dumps(table: dict) -> str:
    """The table as the other parts are written (one space an indent), but an event, or what
    follows it, on one line: the traces stay readable, a line per step."""
    rest = {name: part for name, part in table.items() if name != "concurrency"}
    text = json.dumps(rest, indent=1, ensure_ascii=False)
    part = table["concurrency"]
    lines = ["{"]
    for name in ("about", "defaults"):
        lines.append(f' "{name}": {json.dumps(part[name], ensure_ascii=False)},')
    lines.append(' "traces": [')
    for number, one in enumerate(part["traces"]):
        lines.append("  {")
        for name in ("name", "about", "options"):
            lines.append(f'   "{name}": {json.dumps(one[name], ensure_ascii=False)},')
        for name in ("events", "expect"):
            steps = ",\n".join(f"    {json.dumps(step)}" for step in one[name])
            lines.append(f'   "{name}": [\n{steps}\n   ]' + ("," if name == "events" else ""))
        lines.append("  }" + ("," if number + 1 < len(part["traces"]) else ""))
    lines.append(" ]")
    lines.append("}")
    concurrency = "\n ".join(lines)
    return text[:-2] + ',\n "concurrency": ' + concurrency + "\n}\n"


if __name__ == "__main__":
    main()
