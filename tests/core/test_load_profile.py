"""The load harness end to end, tiny: a real stack, real locust, one user of each kind.

Only that it runs and reports figures; the timings themselves are `make load`'s business.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from loadtest.summary import percentile, summarize

ROOT = Path(__file__).resolve().parents[2]


def test_the_tiny_profile_runs_and_reports_figures(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KOPE_", "DJANGO_"))}
    result = subprocess.run(
        [sys.executable, "-m", "loadtest.run", "--profiles", "tiny", "--seconds", "8",
         "--rounds", "2", "--report", str(report)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Profile tiny: 1 watchers, 1 browsers, 1 reviewers; 8 s" in result.stdout
    assert "aim " in result.stdout
    (summary,) = json.loads(report.read_text())
    names = {row["name"] for row in summary["rows"]}
    assert {"session page", "review queue", "connect"} <= names
    assert all(row["count"] > 0 and math.isfinite(row["p95"]) for row in summary["rows"])
    assert math.isfinite(summary["page_p95"])
    assert summary["errors"] == 0, summary["error_samples"]


def test_a_summary_counts_failures_and_keeps_api_out_of_page_latency() -> None:
    samples = {
        "requests": {
            "GET forest": {"kind": "GET", "name": "forest", "times": [10, 20, 30], "failures": 1},
            "GET API rule": {"kind": "GET", "name": "API rule", "times": [900], "failures": 0},
            "WS event delay": {"kind": "WS", "name": "event delay", "times": [5], "failures": 0},
        },
        "errors": ["1 x GET forest: HTTP 503"],
    }
    summary = summarize("base", {"watchers": 1}, 60, samples)
    assert (summary.page_p95, summary.event_p95, summary.errors) == (30, 5, 1)
    assert summary.aims == {
        "zero errors": False,
        "p95 page latency < 500 ms": True,
        "p95 event delay < 500 ms": True,
    }
    assert math.isnan(percentile([], 0.95))
