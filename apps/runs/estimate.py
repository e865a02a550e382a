"""How big a session will be, before it is launched: rounds, time and tokens.

Upper bounds: the round budget is spent only if the plateau rule does not stop an operator
first. The time per round is measured, not assumed: the median wall time per round of the
latest sessions of the same target and policy that finished on this host, from their start to
their end, so it holds everything a round takes (the policy, retrieval, the reference runs,
the waits inside the session), not only the evaluation. Without such a session yet it falls
back to this team's median evaluation time, which misses all of that, and says so. To the run's
own time comes the work still ahead of it: what the sessions queued or running on this host
have left of their round budgets, each at its own measured pace.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, F, OuterRef, Subquery

from apps.accounts.models import Team
from apps.devices.models import Evaluation
from apps.memory.models import Case, JournalEvent
from apps.runs.config import SessionConfig
from apps.runs.models import OptimizationSession

RECENT_EVALUATIONS = 200
RECENT_SESSIONS = 20
STATUS = OptimizationSession.Status


@dataclass(frozen=True)
class Pace:
    """The seconds one round takes, and what they were measured over."""

    seconds_per_round: float
    measured_over: int  # finished sessions, or evaluations without any
    from_sessions: bool  # False: evaluation time only (no finished session to measure yet)


@dataclass(frozen=True)
class QueueAhead:
    """The sessions queued or running on this host, which this run shares the workers with."""

    sessions: int
    seconds: float | None  # what they have left, at most; None: some have no measured pace


@dataclass(frozen=True)
class RunEstimate:
    operators: int
    evaluations: int  # rounds, at most: operators x rounds
    pace: Pace | None  # None: nothing measured on this host for this team yet
    run_seconds: float | None
    ahead: QueueAhead
    tokens: int  # at most: model tokens (the offline policy spends none)
    tokens_per_iteration: int  # the assembled context, sent once per model call at least

    @property
    def total_seconds(self) -> float | None:
        if self.run_seconds is None or self.ahead.seconds is None:
            return None
        return self.run_seconds + self.ahead.seconds


# --- what was measured -------------------------------------------------------------------------


def measured_pace(*, team: Team, target: str, policy: str) -> Pace | None:
    """Whole rounds of finished sessions where there are some, else evaluations alone."""
    return recent_session_pace(target=target, policy=policy) or recent_evaluation_pace(team)


def recent_session_pace(*, target: str, policy: str) -> Pace | None:
    """The median seconds per round of this host's latest finished sessions of the target and
    policy: from `session_started` to the end, over the rounds (cases) they recorded."""
    started = JournalEvent.objects.filter(session_id=OuterRef("pk"), kind="session_started")
    rows = (
        OptimizationSession.objects.filter(status=STATUS.FINISHED, target=target, policy=policy,
                                           finished_at__isnull=False)
        .annotate(started_at=Subquery(started.values("created_at")[:1]),
                  rounds=Subquery(rounds_recorded()))
        .filter(started_at__isnull=False, rounds__gt=0)
        .order_by("-finished_at")
        .values_list("started_at", "finished_at", "rounds")[:RECENT_SESSIONS]
    )  # fmt: skip
    per_round = [seconds_per_round(started, finished, rounds)
                 for started, finished, rounds in rows if finished is not None]  # fmt: skip
    return Pace(statistics.median(per_round), len(per_round), True) if per_round else None


def rounds_recorded() -> Any:
    """A subquery: the cases (one per round) of the session in the outer query."""
    cases = Case.objects.filter(session_id=OuterRef("pk")).values("session_id")
    return cases.annotate(n=Count("pk")).values("n")


def seconds_per_round(started: datetime, finished: datetime, rounds: int) -> float:
    return (finished - started).total_seconds() / rounds


def recent_evaluation_pace(team: Team) -> Pace | None:
    """The median wall time of this team's latest finished evaluations."""
    rows = (
        Evaluation.objects.filter(team=team, status=Evaluation.Status.DONE,
                                  started_at__isnull=False, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list(F("finished_at") - F("started_at"), flat=True)[:RECENT_EVALUATIONS]
    )  # fmt: skip
    seconds = [duration.total_seconds() for duration in rows]
    return Pace(statistics.median(seconds), len(seconds), False) if seconds else None


# --- the queue ahead ---------------------------------------------------------------------------


def queue_ahead(*, pace: Pace | None) -> QueueAhead:
    """What the sessions queued or running on this host (sent to the workers) have left of
    their round budgets, each at the pace of its own target and policy (`pace` where that has
    none measured)."""
    active = (
        OptimizationSession.objects.filter(status__in=(STATUS.QUEUED, STATUS.RUNNING),
                                           ticket__gt=0)
        .annotate(rounds=Subquery(rounds_recorded()))
        .values_list("target", "policy", "config", "rounds")
    )  # fmt: skip
    paces: dict[tuple[str, str], Pace | None] = {}
    left = []
    for target, policy, config, rounds in active:
        if (target, policy) not in paces:
            paces[target, policy] = recent_session_pace(target=target, policy=policy)
        left.append((rounds_left(config, rounds or 0), paces[target, policy] or pace))
    return QueueAhead(len(left), seconds_left(left))


def rounds_left(config: dict[str, Any], rounds_done: int) -> int:
    """At most: the round budget of each operator, less the rounds already recorded."""
    session = SessionConfig.from_json(config)
    return max(0, session.budgets.rounds * len(session.operators) - rounds_done)


def seconds_left(work: Iterable[tuple[int, Pace | None]]) -> float | None:
    """The seconds the (rounds, pace) left take; None when one pace is unknown."""
    total = 0.0
    for rounds, pace in work:
        if pace is None:
            return None
        total += rounds * pace.seconds_per_round
    return total


# --- the estimate ------------------------------------------------------------------------------


def run_estimate(
    *,
    operators: int,
    rounds: int,
    policy: str,
    context_tokens: int,
    token_budget: int,
    pace: Pace | None,
    ahead: QueueAhead,
) -> RunEstimate:
    evaluations = operators * rounds
    run_seconds = evaluations * pace.seconds_per_round if pace is not None else None
    uses_model = policy != "offline"
    per_iteration = context_tokens if uses_model else 0
    tokens = min(operators * token_budget, evaluations * per_iteration) if uses_model else 0
    return RunEstimate(operators, evaluations, pace, run_seconds, ahead, tokens,
                       per_iteration)  # fmt: skip


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
