"""What the loop writes to move an operator on: the candidate it proposed, the steps its
evaluation's verdict reached, and the case that evaluation judged (with the incumbent it
replaced and the adoptions it made), each under its step's key so that a replayed iteration
writes nothing twice. A `case_recorded` event makes its Case (apps/memory/journal.py)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from apps.agents.policy import Candidate, Proposal
from apps.devices.models import Evaluation
from apps.devices.services import kernel_source_store
from apps.devices.verdicts import verdict_steps
from apps.memory.journal import journal_append
from apps.memory.models import Case
from apps.runs.judging import judge, ran_as_parent
from apps.runs.progress import Progress, step_key


def proposal_record(candidate: Candidate, proposal: Proposal, *, operator: str, iteration: int,
                    parent: Case | None, retrieved: list[str]) -> dict[str, Any]:  # fmt: skip
    """The `candidate_proposed` payload (the candidate's source stored under its hash)."""
    source = kernel_source_store(candidate.source)
    return {
        "operator": operator, "iteration": iteration, "strategy": candidate.strategy,
        "source_sha256": source.sha256, "parent_case_id": parent.pk if parent else None,
        "flags": list(candidate.flags), "threads": candidate.threads,
        "adopted": proposal.adopted, "retrieved": retrieved,
        "rationale": proposal.rationale[:2000],
    }  # fmt: skip


def record_verdict(evaluation: Evaluation, *, session_id: int, position: int, operator: str,
                   iteration: int) -> None:  # fmt: skip
    """Journal the steps the evaluation's verdict reached (compiled, case results, timed)."""
    base = {"operator": operator, "iteration": iteration, "evaluation_id": evaluation.pk}
    for kind, detail in verdict_steps(evaluation.verdict or {}):
        journal_append(session_id=session_id, kind=kind, payload={**base, **detail},
                       step=step_key(position, iteration, kind))  # fmt: skip


def record_case(
    candidate: Candidate, evaluation: Evaluation, progress: Progress, *, session_id: int,
    position: int, operator: str, version_id: int, target: str,
    adopted: list[dict[str, str]], retrieved: list[str],
) -> Case:  # fmt: skip
    """Judge the evaluation against the candidate's parent and record the case of this
    iteration, in one transaction with `incumbent_replaced` when it replaces the incumbent
    and `adoption_recorded` when items were in context."""
    parent, incumbent, n = progress.parent, progress.incumbent, progress.iteration
    judged = judge(evaluation, parent.latency_ms if parent else None,
                   same_binary=ran_as_parent(evaluation, candidate, parent))  # fmt: skip
    source = kernel_source_store(candidate.source)

    def append(kind: str, payload: dict[str, Any]) -> int:
        step = step_key(position, n, kind)
        return journal_append(session_id=session_id, kind=kind, payload=payload, step=step).pk

    with transaction.atomic():
        event_id = append("case_recorded", {
            "iteration": n, "version_id": version_id, "target": target,
            "strategy": candidate.strategy, "outcome": judged.outcome,
            "correct": judged.correct, "parent_case_id": parent.pk if parent else None,
            "tags": strategy_tags(candidate), "source_sha256": source.sha256,
            "validation": judged.validation, "latency_ms": judged.latency_ms,
            "speedup_vs_reference": judged.speedup_vs_reference,
            "speedup_vs_parent": judged.speedup_vs_parent, "feedback": judged.feedback,
            "retrieved": retrieved, "adopted": adopted,
        })  # fmt: skip
        case = Case.objects.get(pk=event_id)
        if replaces_incumbent(case, incumbent):
            append("incumbent_replaced", {
                "operator": operator, "iteration": n, "case_id": case.pk,
                "previous_case_id": incumbent.pk if incumbent else None,
                "latency_ms": case.latency_ms,
                "previous_latency_ms": incumbent.latency_ms if incumbent else None,
            })  # fmt: skip
        if retrieved:
            append("adoption_recorded", {"operator": operator, "iteration": n,
                                         "case_id": case.pk, "retrieved": retrieved,
                                         "adopted": adopted})  # fmt: skip
    return case


def strategy_tags(candidate: Candidate) -> list[str]:
    tags = [candidate.strategy.split("(", 1)[0].strip()]
    if candidate.threads > 1:
        tags.append(f"threads={candidate.threads}")
    return tags + list(candidate.flags)


def replaces_incumbent(case: Case, incumbent: Case | None) -> bool:
    """The first correct, timed kernel; after it, one judged faster than its parent, which is
    the incumbent."""
    if not case.correct or case.latency_ms is None:
        return False
    return incumbent is None or case.outcome == "improved"
