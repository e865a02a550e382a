"""An import whose agent worker is killed mid-way (SIGKILL, out of memory, a second Ctrl-C) is
taken up by the next agent worker to start, on real processes: it was left "running" for ever,
and its page counted "Importing: N of M" for ever."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
from billiard.pool import soft_timeout_sighandler
from django.db import connection
from django.test import Client
from django.utils import timezone

from apps.accounts.roles import Role
from apps.operators.importing import import_execute, import_lock, import_start, imports_held
from apps.operators.models import ImportRun, Operator, OperatorVersion, Suite
from apps.operators.tasks import (
    ORPHANED_AFTER,
    import_folder,
    resend_orphaned_imports,
    resume_orphaned_imports,
)
from tests.factories import MembershipFactory, TeamFactory
from tests.operators.conftest import SAMPLES
from tests.processes import celery_worker, descendant, end, still_running, wait_until
from tests.workbench.test_live_events import process_env

PROBLEMS = 12
# A reference that takes a moment, so the worker is killed with most of the folder to go.
SLOW_PROBLEM = """import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        time.sleep({sleep_s})
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
"""


def slow_folder(root: Path, sleep_s: float = 0.3) -> Path:
    folder = root / "slow"
    folder.mkdir()
    for number in range(1, PROBLEMS + 1):
        (folder / f"{number}_Slow_relu_{number}.py").write_text(
            SLOW_PROBLEM.replace("{sleep_s}", str(sleep_s))
        )
    return folder


def assert_imported_once_each(run: ImportRun) -> None:
    """Done, a line per problem in order; the problem in flight when a worker died (or its
    task's time ran out) may have been stored before: it is then unchanged."""
    assert (run.status, run.error, run.done, run.total) == ("done", "", PROBLEMS, PROBLEMS)
    expected = [f"{n}_Slow_relu_{n}.py" for n in range(1, PROBLEMS + 1)]
    assert [line["problem"] for line in run.report] == expected, run.report
    outcomes = [line["outcome"] for line in run.report]
    assert set(outcomes) <= {"imported", "unchanged"}, run.report
    operators = Operator.objects.filter(team=run.team)
    assert operators.count() == PROBLEMS
    assert OperatorVersion.objects.filter(operator__team=run.team).count() == PROBLEMS
    assert Suite.objects.get(team=run.team).entries.count() == PROBLEMS
    assert sorted(line["operator"] for line in run.report) == sorted(o.slug for o in operators)


def story(run_id: int) -> str:
    run = ImportRun.objects.get(pk=run_id)
    return f"run {run.status} ({run.done} of {run.total}, {run.error!r}): {run.report}"


@pytest.mark.timeout(300)
def test_an_import_whose_worker_is_killed_is_finished_by_the_next_worker(
    transactional_db: None, settings: Any, tmp_path: Path
) -> None:
    settings.KOPE_IMPORT_ROOTS = [tmp_path]
    folder = slow_folder(tmp_path)
    membership = MembershipFactory(team=TeamFactory(slug="killed"), role=Role.ENGINEER)
    client = Client()
    client.force_login(membership.user)
    env = process_env("single-machine")

    with celery_worker(env, "agent", "importer-1@kill") as first:
        response = client.post("/api/teams/killed/imports", {"path": str(folder)},
                               content_type="application/json")  # fmt: skip
        assert response.status_code == 202, response.content
        run_id = response.json()["id"]
        wait_until(lambda: ImportRun.objects.get(pk=run_id).done >= 2, 120,
                   "the import under way", lambda: story(run_id))  # fmt: skip
        os.killpg(first.popen.pid, signal.SIGKILL)
        first.popen.wait()
    killed = ImportRun.objects.get(pk=run_id)
    assert (killed.status, killed.total) == ("running", PROBLEMS)
    assert killed.done < PROBLEMS, "the import ended before its worker was killed"

    with celery_worker(env, "agent", "importer-2@kill"):
        wait_until(lambda: ImportRun.objects.get(pk=run_id).status != "running", 120,
                   "the import to end on the next worker", lambda: story(run_id))  # fmt: skip

    run = ImportRun.objects.get(pk=run_id)
    assert_imported_once_each(run)
    assert [line["outcome"] for line in run.report].count("unchanged") <= 1, run.report


def on_problem(run_id: int, index: int, attempt: int) -> bool:
    """Whether the run's `attempt`-th start of problem number `index` (0-based) is in flight."""
    run = ImportRun.objects.get(pk=run_id)
    return (run.done, run.attempts_at, run.attempts) == (index, index, attempt)


@pytest.mark.timeout(300)
def test_a_problem_the_import_stopped_on_each_time_is_left_out_and_the_rest_imported(
    transactional_db: None, tmp_path: Path
) -> None:
    """A problem whose import killed the worker each time (out of memory, say) was taken up
    by every agent worker that connected, killing it too, and the problems after it never
    came. With KOPE_IMPORT_MAX_ATTEMPTS=2, the third worker leaves it out and goes on."""
    folder = tmp_path / "poison"
    folder.mkdir()
    for number in range(1, 5):  # the third one's reference takes long enough to be killed in
        sleep_s = 30 if number == 3 else 0.05
        (folder / f"{number}_Slow_relu_{number}.py").write_text(
            SLOW_PROBLEM.replace("{sleep_s}", str(sleep_s))
        )
    team = TeamFactory()
    run = import_start(path=str(folder), fmt=None, scale=1.0, team=team, user=None,
                       restrict=False)  # fmt: skip
    env = {**process_env("single-machine"), "KOPE_IMPORT_MAX_ATTEMPTS": "2"}

    for attempt in (1, 2):  # the first worker gets the message, the second resumes the run
        with celery_worker(env, "agent", f"importer-{attempt}@poison") as worker:
            if attempt == 1:
                import_folder.delay(run.pk)
            wait_until(lambda: on_problem(run.pk, 2, attempt), 120,  # noqa: B023
                       f"start {attempt} of the third problem", lambda: story(run.pk))  # fmt: skip
            os.killpg(worker.popen.pid, signal.SIGKILL)
            worker.popen.wait()
    with celery_worker(env, "agent", "importer-3@poison"):
        wait_until(lambda: ImportRun.objects.get(pk=run.pk).status != "running", 120,
                   "the import to end on the third worker", lambda: story(run.pk))  # fmt: skip

    run.refresh_from_db()
    assert (run.status, run.done, run.total) == ("done", 4, 4), story(run.pk)
    assert [line["problem"] for line in run.report] == [
        f"{number}_Slow_relu_{number}.py" for number in range(1, 5)
    ]
    outcomes = [line["outcome"] for line in run.report]
    assert outcomes == ["imported", "imported", "failed", "imported"]
    assert run.report[2]["reason"] == (
        "left out: the import stopped on it 2 times (its worker killed, out of memory or out "
        "of task time); import it alone to see why"
    )
    assert Suite.objects.get(team=team).entries.count() == 3
    assert Operator.objects.filter(team=team).count() == 3


def test_a_task_whose_soft_time_limit_comes_mid_import_leaves_the_rest_to_a_new_one(
    transactional_db: None, tmp_path: Path
) -> None:
    """KOPE_TASK_TIME_LIMIT bounds each task, and an import of a large folder outlasts it.
    The soft limit (SoftTimeLimitExceeded, raised by the pool's SIGUSR1 handler) was reported
    as an "internal error" of the problem in flight, which stored nothing; and the hard limit
    then killed the task."""
    run = import_start(path=str(slow_folder(tmp_path)), fmt=None, scale=1.0,
                       team=TeamFactory(), user=None, restrict=False)  # fmt: skip

    def soft_limit_mid_way() -> None:
        wait_until(lambda: ImportRun.objects.get(pk=run.pk).done >= 2, 60, "the import under way")
        connection.close()
        os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, soft_timeout_sighandler)  # as in a pool process
    limiter = threading.Thread(target=soft_limit_mid_way)
    limiter.start()
    try:
        outcome = import_folder(run.pk)  # the task, here in this process
    finally:
        limiter.join()
        signal.signal(signal.SIGUSR1, previous)
        connection.close()  # as a worker does after each task: the limit may cut a query

    assert outcome == "running"
    cut = ImportRun.objects.get(pk=run.pk)
    assert cut.status == "running" and 2 <= cut.done < PROBLEMS, story(run.pk)
    assert {line["outcome"] for line in cut.report} == {"imported"}, cut.report
    # The next task (queued) takes it up once the lock is let go: at once, or as soon as the
    # database sees the connection closed where the limit cut a query.
    wait_until(lambda: not imports_held(), 30, "the run's lock let go")
    assert import_folder(run.pk) == "done"
    assert_imported_once_each(ImportRun.objects.get(pk=run.pk))


def test_a_run_another_process_holds_is_neither_imported_nor_resumed(
    transactional_db: None,
) -> None:
    """Two workers on one run (a message given back while its worker still runs it, or one
    queued again) must not both import it and write its report."""
    folder = str(SAMPLES / "npukernelbench" / "level2")
    run = import_start(path=folder, fmt=None, scale=1.0, team=None, user=None, restrict=False)
    holding, release = threading.Event(), threading.Event()

    def other_worker() -> None:
        with import_lock(run.pk) as held:
            assert held
            holding.set()
            release.wait(30)
        connection.close()

    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        assert holding.wait(30)
        left = import_execute(run)
        assert (left.status, left.total, left.done, left.report) == ("running", 0, 0, [])
        assert resume_orphaned_imports() == []
    finally:
        release.set()
        thread.join()

    assert import_execute(run).status == "done"
    assert resume_orphaned_imports() == []


def test_an_agent_worker_that_stays_connected_queues_an_orphaned_import_once(
    transactional_db: None,
) -> None:
    """With two agent workers, one killed mid-import: the other, still connected, takes it up
    (its sweep every half minute) instead of leaving it until a worker connects."""
    folder = str(SAMPLES / "npukernelbench" / "level2")

    def running(*, made_ago: Any) -> int:
        run = import_start(path=folder, fmt=None, scale=1.0, team=None, user=None, restrict=False)
        ImportRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - made_ago)
        return run.pk

    orphaned = running(made_ago=ORPHANED_AFTER * 2)
    running(made_ago=ORPHANED_AFTER / 2)  # made a moment ago: its message may be on its way
    finished = running(made_ago=ORPHANED_AFTER * 2)
    ImportRun.objects.filter(pk=finished).update(status="done")
    held = running(made_ago=ORPHANED_AFTER * 2)
    resent: set[int] = set()

    with import_lock(held) as locked:  # a worker imports it
        assert locked
        assert resend_orphaned_imports(resent) == [orphaned]
        assert resend_orphaned_imports(resent) == []  # sent again once
    assert resend_orphaned_imports(resent) == [held]  # its worker died since


@pytest.mark.parametrize("warm", ["true", "false"], ids=["warm-runner", "fresh-process"])
def test_an_import_whose_worker_is_killed_leaves_no_reference_running(
    transactional_db: None, tmp_path: Path, warm: str
) -> None:
    """A reference runs in a session of its own, so killing the agent worker (SIGKILL to its
    process group, the out-of-memory killer) did not reach it: one in a loop went on taking
    a core until its CPU limit."""
    folder = tmp_path / "spinning"
    folder.mkdir()
    (folder / "1_Spinning_relu.py").write_text(
        SLOW_PROBLEM.replace("time.sleep({sleep_s})", "while True:\n            pass")
    )
    run = import_start(path=str(folder), fmt=None, scale=1.0, team=TeamFactory(), user=None,
                       restrict=False)  # fmt: skip
    env = {**process_env("single-machine"), "KOPE_REFERENCE_WARM": warm}
    with celery_worker(env, "agent", "importer@spinning") as worker:
        import_folder.delay(run.pk)
        reference = wait_until(lambda: descendant(worker.popen.pid, leads_a_session), 120,
                               "the reference running", lambda: story(run.pk))  # fmt: skip
        os.killpg(worker.popen.pid, signal.SIGKILL)
        worker.popen.wait()
    try:
        wait_until(lambda: not still_running(reference), 10, "the reference to end with its "
                   "worker", lambda: f"still running: {reference.cmdline()}")  # fmt: skip
    finally:
        end(reference)


def leads_a_session(process: psutil.Process) -> bool:
    """The reference's child: in a session of its own, under the worker."""
    return os.getsid(process.pid) == process.pid
