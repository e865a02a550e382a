"""A device worker killed with SIGKILL in the middle of an evaluation: the next device worker
to start queues the evaluation again, its verdict is recorded once (by the second attempt),
and the session that was waiting for it goes on to finish."""

from __future__ import annotations

import os
import signal

import psutil

from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation
from apps.devices.services import (
    claim_attempt,
    evaluation_fail,
    evaluation_record,
    evaluation_request,
    orphaned_evaluations,
)
from apps.devices.tasks import evaluate
from apps.memory.models import Case, JournalEvent
from apps.runs.config import Budgets, Measurement
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.devices.test_orphaned_evaluations import NAIVE, small_vector_add
from tests.factories import TeamFactory
from tests.processes import celery_worker, descendant, end, still_running, wait_until
from tests.workbench.test_live_events import process_env

ROUNDS = 3


def test_a_device_worker_killed_mid_evaluation_is_replaced_and_the_verdict_kept_once(
    transactional_db: None,
) -> None:
    small_vector_add()
    team = TeamFactory()
    session = session_create(
        team=team, user=None, operators=["vector_add_small"],
        budgets=Budgets(rounds=ROUNDS, plateau=ROUNDS),
        measurement=Measurement(seeds=1, warmup=1, repeats=5),
    )  # fmt: skip
    journal = JournalEvent.objects.filter(session_id=session.pk)
    env = process_env("single-machine")

    def evaluation_in_flight() -> Evaluation | None:
        if not journal.filter(kind="case_recorded").exists():
            return None  # the kill lands after the first iteration, mid-session
        return Evaluation.objects.filter(team=team, status=Evaluation.Status.RUNNING).first()

    with celery_worker(env, "agent", "agent@device-kill"):
        with celery_worker(env, "device.cpu", "device-1@kill") as first:
            killed = wait_until(evaluation_in_flight, 180, "an evaluation in flight")
            os.killpg(first.popen.pid, signal.SIGKILL)  # the worker and its sandboxed child
            first.popen.wait()
        assert Evaluation.objects.get(pk=killed.pk).status == Evaluation.Status.RUNNING
        with celery_worker(env, "device.cpu", "device-2@kill"):
            wait_until(
                lambda: OptimizationSession.objects.get(pk=session.pk).status == "finished",
                240, "the session to finish after the second device worker started",
            )  # fmt: skip

    redone = Evaluation.objects.get(pk=killed.pk)
    assert redone.status == Evaluation.Status.DONE, redone.error
    assert (redone.attempts, redone.worker) == (2, "device-2@kill")
    iterations = Case.objects.filter(session_id=session.pk).values_list("iteration", flat=True)
    assert sorted(iterations) == list(range(ROUNDS))
    for iteration in range(ROUNDS):
        steps = list(journal.filter(payload__iteration=iteration).values_list("kind", flat=True))
        assert steps.count("case_recorded") == 1, (iteration, steps)
        assert steps.count("compiled") == 1, (iteration, steps)  # one verdict reported


def test_a_worker_taken_for_dead_cannot_write_over_the_next_attempt(db: None) -> None:
    version = small_vector_add()
    evaluation, _ = evaluation_request(version=version, source_text="int x;",
                                       options=EvalSettings(seeds=1))  # fmt: skip
    first = claim_attempt(evaluation.pk, 2, "device-1@host")
    assert first is not None and orphaned_evaluations("device.cpu") == [evaluation.pk]
    second = claim_attempt(evaluation.pk, 2, "device-2@host")
    assert second is not None

    stale = evaluation_record(first, {"from": "the first worker"})
    assert stale.status == Evaluation.Status.RUNNING and stale.verdict is None
    assert evaluation_fail(first, "late").status == Evaluation.Status.RUNNING
    done = evaluation_record(second, {"from": "the second worker"})
    assert (done.status, done.verdict) == (Evaluation.Status.DONE, {"from": "the second worker"})
    assert claim_attempt(evaluation.pk, 2, "device-3@host") is None  # finished: not run again


LOOP = "    for (int64_t i = 0; i < n; ++i) {"
SPINNING = NAIVE.replace(LOOP, f"    for (volatile int spin = 1; spin;) {{}}\n{LOOP}")


def test_a_device_worker_killed_mid_evaluation_leaves_no_kernel_running(
    transactional_db: None,
) -> None:
    """The sandboxed child runs in a session of its own, so killing the worker (SIGKILL to its
    process group, the out-of-memory killer) did not reach it: a kernel in a loop went on
    taking a core until its CPU limit, beside the attempt that times the evaluation again."""
    team = TeamFactory()
    evaluation, _ = evaluation_request(version=small_vector_add(), source_text=SPINNING,
                                       options=EvalSettings(seeds=1, warmup=1, repeats=5),
                                       team=team)  # fmt: skip
    with celery_worker(process_env("single-machine"), "device.cpu", "device@orphan") as worker:
        evaluate.apply_async(args=(evaluation.pk,), queue="device.cpu")
        harness = wait_until(lambda: descendant(worker.popen.pid, runs_candidate_code), 120,
                             "the kernel running")  # fmt: skip
        os.killpg(worker.popen.pid, signal.SIGKILL)
        worker.popen.wait()
    try:
        wait_until(lambda: not still_running(harness), 10, "the kernel to end with its worker",
                   lambda: f"still running: {harness.cmdline()}")  # fmt: skip
    finally:
        end(harness)


def runs_candidate_code(process: psutil.Process) -> bool:
    return "apps.devices.cpu_c.harness" in process.cmdline()
