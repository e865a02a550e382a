"""How the workers page says what a worker is running."""

from __future__ import annotations

from apps.devices.workers import running_tasks


def test_running_tasks_are_named_with_their_age_oldest_first_and_without_arguments() -> None:
    active = [
        {"name": "devices.evaluate", "args": [42], "time_start": 990.0},
        {"name": "runs.advance", "args": [7, "ticket"], "time_start": 950.4},
        {"name": "devices.report_alive", "args": [], "time_start": None},
    ]
    assert running_tasks(active, now=1000.0) == [
        "runs.advance for 50 s",
        "devices.evaluate for 10 s",
        "devices.report_alive for 0 s",
    ]
    assert running_tasks([], now=1000.0) == []
