"""The report of bench/quota.py (its tables and chart), with the standard library only, so
that bench/run.py can write it."""

from __future__ import annotations

import math

BATCHES = (1, 10, 50, 100)
PROCESSES = (1, 2, 4, 8)
SECONDS = 2.0
# The binding run: this many a second (an exact log), every process taking as fast as it can.
BINDING_LIMIT, BINDING_WINDOW = 500, 1.0


def quota_section(result) -> list[str]:
    if not result:
        return []
    lines = [
        "## Quota leases for one hot limit",
        "",
        f"Python processes (`ratelimit_module.Quota`, hold 0.5 s) taking one unit at a time "
        f"from one key for {SECONDS:.0f} s each, on the same cores as the server "
        "([bench/quota.py](bench/quota.py)); the chart is "
        "[bench/quota.svg](bench/quota.svg). First with a limit far above the load:",
        "",
        "| Batch | Processes | Decisions/s | Server calls per decision | Admitted per call |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(f"| {row['batch']} | {row['processes']} | {row['per_second']:,.0f} | "
                     f"{row['calls_per_decision']:.3f} | {row['admitted_per_call']:.1f} |")
    lines += [
        "",
        f"Then with a limit that binds ({BINDING_LIMIT} in any {BINDING_WINDOW:.0f} s, an "
        "exact log), every process taking as fast as it can: what they admitted and the server "
        "calls it took (a binding limit asks for half a batch at a time, waited for: at most "
        "a call per half batch, the aim), and the most admitted in any window against the "
        "bound, the limit plus processes × batch.",
        "",
        "| Batch | Processes | Admitted | Server calls | Admitted per call | Most in one window | Bound |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["bound"]:
        per_call = row["admitted"] / max(row["calls"], 1)
        lines.append(f"| {row['batch']} | {row['processes']} | {row['admitted']:,} | "
                     f"{row['calls']:,} | {per_call:.1f} | {row['worst']} | {row['bound']} |")
    lines.append("")
    if result.get("rust"):
        lines += [
            "The Rust crate on one tokio task, on the same server in the same run "
            "([clients/rust/examples/bench.rs](clients/rust/examples/bench.rs)), a limit far "
            "above the load: `governor` in the process (its limits hold in one process only), "
            "`AsyncRateLimiter::check` (a server call per decision) and `AsyncQuota`.",
            "",
            "| Rust | Batch | Decisions/s | Server calls per decision |",
            "|---|---:|---:|---:|",
        ]
        for row in result["rust"]:
            name = {"governor": "`governor` (in-process)", "check": "`check`",
                    "quota": "`AsyncQuota`"}[row["name"]]
            batch = "—" if row["name"] == "governor" else str(row["batch"])
            lines.append(f"| {name} | {batch} | {row['per_second']:,.0f} | "
                         f"{row['calls_per_decision']:.3f} |")
        lines.append("")
    return lines


def quota_svg(result) -> str:
    """Decisions per second by processes, one line per batch (log scale)."""
    width, height, left, bottom = 560, 300, 70, 40
    rows = result["rows"]
    top = max(row["per_second"] for row in rows)
    low = max(min(row["per_second"] for row in rows), 1)
    span = math.log10(top) - math.log10(low) or 1

    def x(processes: int) -> float:
        return left + PROCESSES.index(processes) * (width - left - 20) / (len(PROCESSES) - 1)

    def y(value: float) -> float:
        return height - bottom - (math.log10(max(value, low)) - math.log10(low)) / span * (height - bottom - 20)

    colours = ["#888", "#1f77b4", "#2ca02c", "#d62728"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="12">Decisions per second (log scale) by processes</text>']
    for processes in PROCESSES:
        parts.append(f'<text x="{x(processes):.0f}" y="{height - 20}" text-anchor="middle">'
                     f'{processes}</text>')
    for colour, batch in zip(colours, BATCHES):
        points = [(x(row["processes"]), y(row["per_second"])) for row in rows
                  if row["batch"] == batch]
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        px, py = points[-1]
        parts.append(f'<text x="{px - 4:.0f}" y="{py - 6:.0f}" text-anchor="end" '
                     f'fill="{colour}">batch {batch}</text>')
    parts.append("</svg>\n")
    return "\n".join(parts)


