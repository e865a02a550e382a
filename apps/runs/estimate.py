"""How big a session will be, before it is launched: evaluations, device time and tokens.

Upper bounds: the round budget is spent only if the plateau rule does not stop an operator
first. The device time per evaluation is this team's recent median, measured, not assumed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from django.db.models import F

from apps.accounts.models import Team
from apps.devices.models import Evaluation

RECENT_EVALUATIONS = 200


@dataclass(frozen=True)
class RunEstimate:
    operators: int
    evaluations: int  # at most: operators x rounds
    seconds_per_evaluation: float | None  # None: this team has no finished evaluation yet
    device_seconds: float | None  # with one device worker
    tokens: int  # at most: model tokens (the offline policy spends none)
    tokens_per_iteration: int  # the assembled context, sent once per model call at least


def recent_seconds_per_evaluation(team: Team) -> float | None:
    """The median wall time of this team's latest finished evaluations."""
    rows = (
        Evaluation.objects.filter(team=team, status=Evaluation.Status.DONE,
                                  started_at__isnull=False, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list(F("finished_at") - F("started_at"), flat=True)[:RECENT_EVALUATIONS]
    )  # fmt: skip
    seconds = [duration.total_seconds() for duration in rows]
    return statistics.median(seconds) if seconds else None


def run_estimate(
    *,
    operators: int,
    rounds: int,
    policy: str,
    context_tokens: int,
    token_budget: int,
    seconds_per_evaluation: float | None,
) -> RunEstimate:
    evaluations = operators * rounds
    device = evaluations * seconds_per_evaluation if seconds_per_evaluation is not None else None
    uses_model = policy != "offline"
    per_iteration = context_tokens if uses_model else 0
    tokens = min(operators * token_budget, evaluations * per_iteration) if uses_model else 0
    return RunEstimate(operators, evaluations, seconds_per_evaluation, device, tokens,
                       per_iteration)  # fmt: skip


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
