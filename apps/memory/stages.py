"""Closing a stage of an operator (SAGE): its score journaled once, the items its iterations
had in context credited with it (ATU), the use of hot memory counted, and the rules the credit
earned proposed (UGC).

An operator has two stages: correctness, which ends at its first correct kernel (or with the
operator, failed), and optimization, from that kernel to the best one. The loop
(apps/runs/loop.py) says which stage ended; this module scores and closes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction

from apps.accounts.models import Team
from apps.memory.journal import journal_append, journal_record
from apps.memory.keys import id_in_key
from apps.memory.learning import correctness_stage_score, optimization_stage_score
from apps.memory.models import Case
from apps.memory.values import (
    Distiller,
    MemoryMode,
    consolidate,
    record_hot_memory_use,
    stage_credit,
)


@dataclass(frozen=True)
class Stage:
    name: str  # "correctness" or "optimization"
    score: float
    cases: list[Case]  # the stage's iterations: what they had in context earns the credit
    first: Case | None = None  # optimization: the first correct kernel
    best: Case | None = None  # optimization: the best kernel


def correctness_passed(cases: list[Case], first_correct: Case) -> Stage:
    """The correctness stage that ended at the operator's first correct kernel."""
    stage_cases = [c for c in cases if c.iteration <= first_correct.iteration]
    return Stage("correctness", correctness_stage_score(True), stage_cases)


def final_stage(cases: list[Case], incumbent: Case | None) -> Stage:
    """The stage the operator was in when it finished: correctness, failed, when none of its
    kernels was correct; else optimization, scored from the first correct kernel to the best
    (the incumbent), over the iterations after the first."""
    first = next((c for c in cases if c.correct), None)
    if first is None:
        return Stage("correctness", correctness_stage_score(False), cases)
    best = incumbent or first
    score = optimization_stage_score(first.latency_ms or 0.0, best.latency_ms or 0.0)
    later = [c for c in cases if c.iteration > first.iteration]
    return Stage("optimization", score, later, first=first, best=best)


def close_stage(stage: Stage, *, session_id: int, team: Team, mode: MemoryMode, operator: str,
                position: int, distiller: Callable[[], Distiller]) -> None:  # fmt: skip
    """Journal the stage's score and credit its items once (under the keys
    `<position>:<stage>:scored` and `:credit`, so a replay credits nothing twice), then let
    consolidation propose the rules it earned, worded by `distiller()`."""
    retrieved = list(dict.fromkeys(k for c in stage.cases for k in c.retrieved))
    adopted = list(dict.fromkeys(a["key"] for c in stage.cases for a in c.adopted))
    step = f"{position}:{stage.name}"
    used_rules = {n for k in adopted if (n := id_in_key(k, "rule")) is not None}
    first, best = stage.first, stage.best
    with transaction.atomic():  # credited once with the stage's score, or not at all
        _, new = journal_record(session_id=session_id, kind="stage_scored", payload={
            "operator": operator, "stage": stage.name, "score": stage.score,
            "retrieved": retrieved, "adopted": adopted,
            "latency_first_ms": first.latency_ms if first else None,
            "latency_best_ms": best.latency_ms if best else None,
        }, step=f"{step}:scored")  # fmt: skip
        if new:
            stage_credit(session_id=session_id, mode=mode, stage=stage.name, operator=operator,
                         score=stage.score, retrieved=retrieved, adopted=adopted,
                         step=f"{step}:credit")  # fmt: skip
            record_hot_memory_use(team, used_rules, mode=mode)
    for rule in consolidate(team, mode=mode, distill=distiller()):
        version = rule.versions.order_by("-number").first()
        journal_append(session_id=session_id, kind="rule_proposed", payload={
            "rule_id": rule.pk, "source_key": rule.source_key,
            "statement": version.statement if version else "",
        }, step=f"rule:{rule.pk}")  # fmt: skip
