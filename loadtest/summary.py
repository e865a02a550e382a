"""The load run's figures: percentiles of the raw samples the locustfile saved, and the table.

Pure Python on plain data (no Django, no locust), so the driver and the test can both use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The aims, on a 2-core machine.
AIM_PAGE_P95_MS = 500.0
AIM_EVENT_P95_MS = 500.0
EVENT_NAME = "event delay"


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Row:
    kind: str  # GET, POST, WS
    name: str
    count: int
    failures: int
    p50: float
    p95: float
    p99: float


@dataclass(frozen=True)
class Summary:
    profile: str
    users: dict[str, int]
    seconds: int
    rows: list[Row]
    page_p95: float
    event_p50: float
    event_p95: float
    events: int
    errors: int
    error_samples: list[str]

    @property
    def aims(self) -> dict[str, bool]:
        return {
            "zero errors": self.errors == 0,
            f"p95 page latency < {AIM_PAGE_P95_MS:.0f} ms": self.page_p95 < AIM_PAGE_P95_MS,
            f"p95 event delay < {AIM_EVENT_P95_MS:.0f} ms": self.event_p95 < AIM_EVENT_P95_MS,
        }


def summarize(
    profile: str, users: dict[str, int], seconds: int, samples: dict[str, object]
) -> Summary:
    """samples: {"requests": {"KIND name": {"kind", "name", "times": [ms], "failures": n}},
    "errors": ["message", ...]} as written by the locustfile."""
    requests: dict[str, dict[str, object]] = samples["requests"]  # type: ignore[assignment]
    rows, page_times, event_times, failures = [], [], [], 0
    for entry in sorted(requests.values(), key=lambda e: (str(e["kind"]), str(e["name"]))):
        times = [float(t) for t in entry["times"]]  # type: ignore[attr-defined]
        failed = int(entry["failures"])  # type: ignore[call-overload]
        failures += failed
        rows.append(
            Row(
                str(entry["kind"]),
                str(entry["name"]),
                len(times),
                failed,
                percentile(times, 0.50),
                percentile(times, 0.95),
                percentile(times, 0.99),
            )
        )
        if entry["kind"] == "GET" and not str(entry["name"]).startswith("API"):
            page_times += times
        elif entry["name"] == EVENT_NAME:
            event_times += times
    errors: list[str] = list(samples.get("errors", []))  # type: ignore[call-overload]
    return Summary(
        profile,
        users,
        seconds,
        rows,
        percentile(page_times, 0.95),
        percentile(event_times, 0.50),
        percentile(event_times, 0.95),
        len(event_times),
        failures,
        errors[:10],
    )


def render(summary: Summary) -> str:
    users = ", ".join(f"{n} {name}" for name, n in summary.users.items())
    lines = [
        f"Profile {summary.profile}: {users}; {summary.seconds} s",
        f"{'type':<5} {'name':<34} {'count':>7} {'fail':>5} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'p99 ms':>8}",
    ]
    for row in summary.rows:
        lines.append(
            f"{row.kind:<5} {row.name[:34]:<34} {row.count:>7} {row.failures:>5} "
            f"{row.p50:>8.0f} {row.p95:>8.0f} {row.p99:>8.0f}"
        )
    lines.append(f"pages (every GET but the API): p95 {summary.page_p95:.0f} ms")
    lines.append(
        f"event delay: p50 {summary.event_p50:.0f} ms, p95 {summary.event_p95:.0f} ms "
        f"over {summary.events} events"
    )
    lines.append(f"errors: {summary.errors}")
    lines += [f"  {message}" for message in summary.error_samples]
    lines += [f"aim {'met   ' if met else 'MISSED'} {aim}" for aim, met in summary.aims.items()]
    return "\n".join(lines)
