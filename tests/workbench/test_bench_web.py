"""`manage.py bench web` runs end to end at small sizes and leaves nothing behind.

No timing is asserted: the figures are for reading (a speed goal is the benchmark's output).
"""

from __future__ import annotations

import json
import subprocess
import sys

from django.conf import settings
from django.db import connection

from apps.accounts.models import Team
from apps.benchmarks.web import web_table
from tests.workbench.test_live_events import process_env

FIGURES = ("forest_60_ms", "session_40_events_ms", "event_delay_p95_ms")  # at --quick's sizes


def test_bench_web_prints_its_figures_and_drops_its_database(transactional_db: None) -> None:
    # Run as people run it, in its own process (it swaps its process's database and channel
    # layer while it measures), on the test database's server.
    database = connection.settings_dict["NAME"]
    command = [sys.executable, "manage.py", "bench", "web", "--json", "--quick"]
    result = subprocess.run(command, cwd=settings.BASE_DIR, env=process_env("single-machine"),
                            capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]

    report = json.loads(result.stdout)
    for name in (*FIGURES, "forest_opened_p50_ms", "session_p95_ms", "event_delay_p50_ms"):
        assert isinstance(report[name], float) and report[name] > 0, name
    assert report["forest_queries"] > 0 and report["live_events"] == 5
    assert "starting Daphne" in result.stderr
    assert connection.settings_dict["NAME"] == database
    assert not Team.objects.filter(slug="bench-web").exists()  # its data was elsewhere
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [report["database"]])
        assert cursor.fetchone() is None
    table = web_table(report)  # what the command prints without --json
    assert "forest page, 60 cases" in table and "event delay, commit -> websocket" in table
    assert headline_figures(table) == {name: f"{report[name]:.1f}" for name in FIGURES}


def headline_figures(table: str) -> dict[str, str]:
    """The figures the table's last line names, by name: the same names as the JSON's keys."""
    words = table.splitlines()[-1].replace("(medians)", "").split()
    return dict(zip(words[::2], words[1::2], strict=True))
