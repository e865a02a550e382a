"""`manage.py bench web` runs end to end at small sizes and leaves nothing behind.

No timing is asserted: the figures are for reading (a speed goal is the benchmark's output).
"""

from __future__ import annotations

import io
import json

from django.core.management import call_command
from django.db import connection

from apps.accounts.models import Team
from apps.workbench.bench import web_table

FIGURES = ("forest_5000_ms", "session_1000_events_ms", "event_delay_p95_ms")


def test_bench_web_prints_its_figures_and_drops_its_database(transactional_db: None) -> None:
    database = connection.settings_dict["NAME"]
    out, err = io.StringIO(), io.StringIO()

    call_command("bench", "web", "--json", "--quick", stdout=out, stderr=err)

    report = json.loads(out.getvalue())
    for name in (*FIGURES, "forest_opened_p50_ms", "session_p95_ms", "event_delay_p50_ms"):
        assert isinstance(report[name], float) and report[name] > 0, name
    assert report["forest_queries"] > 0 and report["live_events"] == 5
    assert "starting Daphne" in err.getvalue()
    assert connection.settings_dict["NAME"] == database  # back on the test database
    assert not Team.objects.filter(slug="bench-web").exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [report["database"]])
        assert cursor.fetchone() is None
    table = web_table(report)  # what the command prints without --json
    assert "forest page, 60 cases" in table and "event delay, commit -> websocket" in table
