"""Which running evaluations a device worker's orphan sweep queues again: those whose process
died, never one a live `manage.py evaluate` runs (it has no Celery worker to answer a ping)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from apps.core.locks import advisory_lock
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation
from apps.devices.services import (
    LOCK_NAMESPACE,
    claim_attempt,
    evaluation_request,
    orphaned_evaluations,
)
from apps.operators.builtin_suite import BUILTIN_DIR
from apps.operators.models import OperatorVersion
from apps.operators.spec import CaseSpec
from tests.factories import small_builtin
from tests.processes import Process, celery_worker, wait_until
from tests.workbench.test_live_events import process_env

NAIVE = (BUILTIN_DIR / "vector_add" / "naive.c").read_text()
SWEPT = re.compile(r"devices\.resume_orphaned_evaluations\[[^\]]+\] succeeded in \S+: (\[.*\])")


def small_vector_add() -> OperatorVersion:
    cases = [CaseSpec("seven", {"n": 7}), CaseSpec("timing", {"n": 65536}, timing=True)]
    return small_builtin("vector_add", cases)


def test_only_an_evaluation_whose_lock_nobody_holds_is_an_orphan(db: None) -> None:
    evaluation, _ = evaluation_request(version=small_vector_add(), source_text="int x;",
                                       options=EvalSettings(seeds=1))  # fmt: skip
    claim_attempt(evaluation.pk, 2, "device-1@host")
    with advisory_lock(LOCK_NAMESPACE, evaluation.pk) as held:
        assert held
        assert orphaned_evaluations("device.cpu") == []
    assert orphaned_evaluations("device.cpu") == [evaluation.pk]


def test_a_device_worker_that_starts_leaves_alone_what_manage_py_evaluate_runs(
    transactional_db: None, tmp_path: Path
) -> None:
    """The worker's sweep pinged the Celery workers and queued again every running evaluation
    whose worker did not answer: `evaluate`'s, then run a second time beside it."""
    small_vector_add()
    kernel = tmp_path / "kernel.c"
    kernel.write_text(NAIVE)
    env = process_env("single-machine")
    command = [sys.executable, "manage.py", "evaluate", "vector_add_small", str(kernel),
               "--seeds", "1", "--warmup", "1", "--repeats", "5"]  # fmt: skip
    evaluate = subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)  # fmt: skip
    try:
        running = wait_until(lambda: Evaluation.objects.filter(status="running").first(), 120,
                             "the evaluation to start")  # fmt: skip
        # Held still while the worker starts and sweeps: alive, its evaluation unfinished.
        evaluate.send_signal(signal.SIGSTOP)
        try:
            with celery_worker(env, "device.cpu", "device@sweep") as worker:
                requeued = wait_until(lambda: swept(worker), 60, "the worker's orphan sweep")
        finally:
            evaluate.send_signal(signal.SIGCONT)
        output, _ = evaluate.communicate(timeout=180)
    finally:
        evaluate.kill()
        evaluate.wait()

    assert requeued == "[]", worker.output[-3000:]
    evaluation = Evaluation.objects.get(pk=running.pk)
    assert evaluation.status == Evaluation.Status.DONE, (evaluation.error, output)
    runner = f"evaluate@{socket.gethostname()} (pid {evaluate.pid})"
    assert (evaluation.attempts, evaluation.worker) == (1, runner), output


def swept(worker: Process) -> str | None:
    """What the sweep queued again, as its worker logged it."""
    found = SWEPT.search(worker.output)
    return found[1] if found else None
