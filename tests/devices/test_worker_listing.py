"""How the workers page says which workers are online and what each is running."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from celery import current_app

from apps.devices.workers import WorkerInfo, running_tasks, worker_info, workers_online
from apps.operators.importing import import_start
from apps.operators.tasks import import_folder
from tests.operators.test_import_worker_death import SLOW_PROBLEM
from tests.processes import celery_worker, wait_until
from tests.workbench.test_live_events import process_env


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


def test_a_worker_of_a_version_without_the_status_command_is_listed_by_name() -> None:
    """Celery answers an unknown broadcast command with an error instead of the status."""
    answer = {"error": "No such command: workbench_status"}
    assert worker_info("old@host", answer) == WorkerInfo(name="old@host")


def listed(name: str) -> WorkerInfo | None:
    return next((worker for worker in workers_online() if worker.name == name), None)


@pytest.mark.timeout(180)
def test_a_worker_answers_with_its_queues_and_the_task_it_runs(
    transactional_db: None, tmp_path: Path
) -> None:
    """One broadcast brings both (it was two, each waiting the whole ping timeout)."""
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "1_Slow_relu_1.py").write_text(SLOW_PROBLEM.replace("{sleep_s}", "30"))
    env = process_env("single-machine")
    # A message an earlier test left on these queues (an embedding no worker took) would be
    # run by this worker too, and listed beside the import.
    current_app.control.purge()

    with celery_worker(env, "agent,device.cpu", "listed@test", pool="prefork") as worker:
        idle = wait_until(lambda: listed("listed@test"), 30, "the worker to answer")
        assert (idle.queues, idle.active_tasks, idle.running) == (["agent", "device.cpu"], 0, [])
        run = import_start(path=str(folder), fmt=None, scale=1.0, team=None, user=None,
                           restrict=False)  # fmt: skip
        import_folder.delay(run.pk)
        busy = wait_until(lambda: (found := listed("listed@test")) and found.running and found,
                          60, "the worker to list the import it runs")  # fmt: skip
        os.killpg(worker.popen.pid, signal.SIGKILL)  # not the reference's 30 s
        worker.popen.wait()

    assert busy.active_tasks == 1
    assert busy.running[0].startswith("operators.import_folder for "), busy.running
