"""Where the loop has a candidate evaluated: on a device worker of the session's target (a
session), or in this process (benchmarks and commands; the sandboxing is the same)."""

from __future__ import annotations

import time
from datetime import datetime

from django.conf import settings

from apps.agents.policy import Candidate
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation
from apps.operators.models import OperatorVersion
from apps.runs.loop import Evaluate, SessionPaused
from apps.runs.models import OptimizationSession


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
