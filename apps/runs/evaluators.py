"""How the loop has a candidate evaluated: with which settings (its parent timed beside it
where one process can run both), where (on a device worker of the session's target, or in
this process for benchmarks and commands; the sandboxing is the same), and what it does when
no verdict came back."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings

from apps.agents.policy import Candidate
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation
from apps.devices.targets import target_get
from apps.memory.models import Case
from apps.operators.models import OperatorVersion
from apps.runs.candidates import candidate_of_case
from apps.runs.config import Measurement
from apps.runs.models import OptimizationSession

Evaluate = Callable[[OperatorVersion, Candidate, EvalSettings, OptimizationSession], Evaluation]


class SessionPaused(Exception):
    """The iteration cannot go on now (the model's API gave up, no device worker answered)."""


# --- the settings -----------------------------------------------------------------------------


def eval_settings(candidate: Candidate, measurement: Measurement, *, target: str,
                  parent: Case | None) -> EvalSettings:  # fmt: skip
    """The candidate's evaluation: the session's measurement, its threads and flags, and its
    parent as the baseline where `baseline_for` allows."""
    return EvalSettings(
        seeds=measurement.seeds,
        warmup=measurement.warmup,
        repeats=measurement.repeats,
        threads=candidate.threads,
        extra_flags=tuple(candidate.flags),
        **baseline_for(candidate, parent, target),
    )


def baseline_for(candidate: Candidate, parent: Case | None, target: str) -> dict[str, Any]:
    """The parent, timed beside the candidate, when it is a correct, timed kernel that runs
    as it ran at the candidate's threads (one process runs both): timings taken minutes
    apart differ by more than many real gains on a shared host, side by side they do not."""
    if not target_get(target).times_baseline or not timed_kernel(parent):
        return {}
    assert parent is not None
    return baseline_settings(candidate, parent, candidate_of_case(parent))


def baseline_settings(candidate: Candidate, baseline: Case, ran: Candidate) -> dict[str, Any]:
    """The EvalSettings fields that time `baseline`'s kernel (proposed as `ran`) beside
    `candidate` in one process; {} when one process cannot run both as they ran. Without a
    parallel region the thread count changes nothing (the parallel loop's first candidate,
    which brings the cores, is compared with its serial parent)."""
    assert baseline.source is not None
    if ran.threads != candidate.threads and "omp parallel" in baseline.source.text:
        return {}
    return {"baseline_sha256": baseline.source.sha256, "baseline_flags": tuple(ran.flags)}


def timed_kernel(case: Case | None) -> bool:
    return (case is not None and case.correct and case.latency_ms is not None
            and case.source is not None)  # fmt: skip


def carried_out(evaluation: Evaluation) -> Evaluation:
    """The evaluation, when it has a verdict; SessionPaused when it could not be carried out,
    which is not the candidate's fault (a reference that failed, workers that died): resuming
    replays the iteration and asks for the evaluation again."""
    if evaluation.status == Evaluation.Status.FAILED:
        raise SessionPaused(f"evaluation {evaluation.pk} could not be carried out: "
                            f"{evaluation.error}")  # fmt: skip
    return evaluation


# --- where it runs ----------------------------------------------------------------------------


def evaluate_on_worker(version: OperatorVersion, candidate: Candidate, options: EvalSettings,
                       session: OptimizationSession) -> Evaluation:  # fmt: skip
    """Queue the evaluation for a device worker of the target and wait for its verdict."""
    from apps.devices.services import evaluation_start

    evaluation = evaluation_start(version=version, source_text=candidate.source, options=options,
                                  team=session.team, target=session.target)  # fmt: skip
    deadline = time.monotonic() + evaluation_wait_s()
    while time.monotonic() < deadline:
        evaluation.refresh_from_db()
        if evaluation.status in (Evaluation.Status.DONE, Evaluation.Status.FAILED):
            return evaluation
        time.sleep(0.2)
    raise SessionPaused(f"evaluation {evaluation.pk} did not finish within "
                        f"{evaluation_wait_s():.0f} s: is a device worker for "
                        f"{session.target} running?")  # fmt: skip


def evaluation_wait_s() -> float:
    # Every attempt may take the whole timeout of its confined runs (correctness, timing and
    # diagnostics each start one), plus compiling and the reference.
    return float(settings.KOPE_EVAL_TIMEOUT_S * 4 * settings.KOPE_EVAL_MAX_ATTEMPTS + 120)


def evaluate_here(version: OperatorVersion, candidate: Candidate, options: EvalSettings,
                  session: OptimizationSession) -> Evaluation:  # fmt: skip
    """Evaluate in this process (benchmarks and commands; the sandboxing is the same)."""
    return evaluate_here_since(None)(version, candidate, options, session)


def evaluate_here_since(since: datetime | None) -> Evaluate:
    """`evaluate_here`, measuring again any candidate whose stored verdict is older than
    `since`: a benchmark compares what it measured itself, under today's conditions."""

    def evaluate(version: OperatorVersion, candidate: Candidate, options: EvalSettings,
                 session: OptimizationSession) -> Evaluation:  # fmt: skip
        from apps.devices.services import evaluation_execute, evaluation_request

        evaluation, to_run = evaluation_request(version=version, source_text=candidate.source,
                                                options=options, team=session.team,
                                                target=session.target)  # fmt: skip
        finished = evaluation.finished_at
        if since is not None and finished is not None and finished < since:
            evaluation, to_run = evaluation_request(
                version=version, source_text=candidate.source, options=options,
                team=session.team, target=session.target, rerun=True,
            )  # fmt: skip
        # Here nobody else runs it: one left RUNNING was cut short (this process was killed),
        # and counts as an attempt like a worker that died.
        if to_run or evaluation.status in (Evaluation.Status.QUEUED, Evaluation.Status.RUNNING):
            evaluation = evaluation_execute(
                evaluation.pk, max_attempts=settings.KOPE_EVAL_MAX_ATTEMPTS
            )
        return evaluation

    return evaluate
