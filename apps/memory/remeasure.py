"""Measuring a case's kernel again, on purpose.

A verdict is stored per (kernel, operator version, target, settings) and reused by every later
ask, so a re-run session's cases carry the first run's figures. Measuring again makes a new
evaluation under the same settings with the next `measurement` number, timed beside the same
parent kernel; the stored verdict, and the case's own figures, stay as they were."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction

from apps.accounts.models import Team
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation
from apps.devices.services import evaluation_start
from apps.memory.models import Case
from apps.memory.selectors import case_evaluation

PENDING = (Evaluation.Status.QUEUED, Evaluation.Status.RUNNING)


@dataclass(frozen=True)
class Measurement:
    """One measurement again of a case's kernel, as the case page shows it."""

    evaluation: Evaluation
    number: int
    median_ms: float | None
    speedup_vs_reference: float | None
    vs_parent: float | None  # timed beside the parent kernel in the same process

    @property
    def pending(self) -> bool:
        return self.evaluation.status in PENDING


def measured_settings(team: Team, case: Case) -> EvalSettings | None:
    """The settings the case's verdict was measured with; None if it has no evaluation."""
    evaluation = case_evaluation(team, case)
    if evaluation is None or not evaluation.options.get("timing", True):
        return None
    return settings_of(evaluation)


def measurements_again(team: Team, case: Case) -> list[Measurement]:
    """The case's kernel measured again by this team under its verdict's settings, latest
    first."""
    settings = measured_settings(team, case)
    if settings is None or case.source_id is None:
        return []
    return [measurement_of(e) for e in measured_again(case, settings).filter(team=team)]


def measured_again(case: Case, settings: EvalSettings) -> Any:
    """Every team's measurements again of the case's kernel under `settings`, latest first:
    evaluations are shared by key, so the next number is counted over all of them."""
    same = Evaluation.objects.filter(
        source_id=case.source_id, version_id=case.version_id, target=case.target,
        options__measurement__gte=1,
    ).order_by("-created_at")  # fmt: skip
    return same.filter(pk__in=[e.pk for e in same if settings_of(e) == settings])


def settings_of(evaluation: Evaluation) -> EvalSettings:
    """The evaluation's settings but for which measurement it is."""
    return replace(EvalSettings.from_json(evaluation.options), measurement=0)


def measurement_of(evaluation: Evaluation) -> Measurement:
    timed: dict[str, Any] = (evaluation.verdict or {}).get("timed") or {}
    candidate = timed.get("candidate") or {}
    return Measurement(evaluation=evaluation, number=int(evaluation.options["measurement"]),
                       median_ms=candidate.get("median_ms"),
                       speedup_vs_reference=timed.get("speedup") if candidate else None,
                       vs_parent=timed.get("vs_baseline"))  # fmt: skip


@transaction.atomic
def measure_again(team: Team, case: Case, user: Any) -> Evaluation | None:
    """Queue the case's kernel to be measured again, unless a measurement of it is already
    under way (a second click waits for that one); None if the case was never timed."""
    settings = measured_settings(team, case)
    if settings is None or case.source is None:
        return None
    earlier = measurements_again(team, case)
    if earlier and earlier[0].pending:
        return earlier[0].evaluation
    numbers = (e.options["measurement"] for e in measured_again(case, settings))
    number = max(numbers, default=0) + 1
    return evaluation_start(version=case.version, source_text=case.source.text,
                            options=replace(settings, measurement=number), team=team,
                            user=user, target=case.target)  # fmt: skip
