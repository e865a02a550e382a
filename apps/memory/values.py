"""Learning from use in the database: ATU credit at the end of a stage, the UGC gate, hot
memory frequencies. The arithmetic is apps/memory/learning.py; this module applies it, and
records every value update as a journal event (old and new V per item), so a value history
can be plotted and cannot be rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from apps.accounts.models import Team
from apps.memory.candidates import earned_by_claim, evidence_for, summarize
from apps.memory.hot import hot_memory_refresh
from apps.memory.journal import journal_append
from apps.memory.learning import credit, next_frequency, updated_value
from apps.memory.models import JournalEvent, MemoryVector, Rule
from apps.memory.rules import Wording, hot_memory, rule_propose
from apps.memory.selectors import value_keys


class MemoryMode(StrEnum):
    """How a session uses memory: not at all, retrieving only (it writes nothing: SAGE's
    cross-model transfer test), or retrieving and learning."""

    OFF = "off"
    READ_ONLY = "read_only"
    READ_WRITE = "read_write"


def stage_credit(
    *,
    session_id: int,
    mode: MemoryMode,
    stage: str,
    operator: str,
    score: float,
    retrieved: list[str],
    adopted: list[str],
    step: str = "",
) -> JournalEvent | None:
    """Credit the items of one finished stage (deduplicated); None when the mode writes
    nothing or nothing was credited. With a `step` key, a stage already credited is not
    credited again.

    A rule and its source experience share one identifier and one V (SAGE's UGC): an adopted
    "rule:7" credits the V its hot-memory priority and retrieval rank read, held on the source
    experience's vector (selectors.value_keys), and counts once with that experience."""
    if mode != MemoryMode.READ_WRITE:
        return None
    holders = value_keys([*retrieved, *adopted])
    retrieved = [holders[key] for key in retrieved]
    adopted = [holders[key] for key in adopted]
    feedback = credit(score, retrieved, adopted)
    if not feedback:
        return None
    with transaction.atomic():
        if step and JournalEvent.objects.filter(session_id=session_id, step=step).exists():
            return None
        items = [
            _apply(key, value, operator, key in adopted) for key, value in sorted(feedback.items())
        ]
        payload = {
            "stage": stage,
            "operator": operator,
            "score": score,
            "items": [i for i in items if i],
        }
        return journal_append(
            session_id=session_id, kind="value_updated", payload=payload, step=step
        )


def _apply(key: str, feedback: float, operator: str, was_adopted: bool) -> dict[str, Any] | None:
    item = MemoryVector.objects.select_for_update().filter(key=key).first()
    if item is None:
        return None  # an item that has left memory is not credited
    old = item.value
    item.value = updated_value(old, feedback, item.retrievals, settings.KOPE_ATU_MIN_RATE)
    item.retrievals += 1
    if was_adopted:
        item.adoptions += 1
        item.adopted_operators = sorted({*item.adopted_operators, operator})
    item.save(update_fields=["value", "retrievals", "adoptions", "adopted_operators"])
    return {"key": key, "feedback": feedback, "old": old, "new": item.value,
            "retrievals": item.retrievals}  # fmt: skip


def value_history(key: str) -> list[dict[str, Any]]:
    """Every update of one item's V, oldest first, from the journal."""
    events = JournalEvent.objects.filter(
        kind="value_updated", payload__items__contains=[{"key": key}]
    )
    history = []
    for event in events.order_by("created_at", "pk"):
        item = next(i for i in event.payload["items"] if i["key"] == key)
        stage = event.payload["stage"]
        history.append({"at": event.created_at, "session": event.session_id, "stage": stage,
                        "old": item["old"], "new": item["new"]})  # fmt: skip
    return history


def rule_candidates(team: Team) -> QuerySet[MemoryVector]:
    """The team's experiences that may be past the UGC gate and have no rule yet: V > 0 and
    adopted often enough at all (the adoptions that improved, which the gate counts, are
    among these; candidates.earned decides)."""
    has_rule = Rule.objects.filter(team=team).values("source_key")
    items = MemoryVector.objects.filter(team=team, kind=MemoryVector.Kind.CASE, value__gt=0,
                                        adoptions__gte=settings.KOPE_UGC_MIN_ADOPTIONS)  # fmt: skip
    return items.exclude(key__in=has_rule).order_by("pk")


@dataclass(frozen=True)
class Experience:
    """An experience past the UGC gate as a distiller reads it: its key and text, and the
    deterministic summarizer's wording of it, which a distiller can fall back to."""

    key: str
    text: str
    summary: Wording


# Words a rule from an experience and its evidence; returns the wording and a note on how it
# was distilled (kept with the evidence). The Claude policy passes one that asks the model.
Distiller = Callable[[Experience, dict[str, Any]], tuple[Wording, str]]


def summarizer(item: Experience, evidence: dict[str, Any]) -> tuple[Wording, str]:
    return item.summary, "deterministic summarizer"


def consolidate(team: Team, *, mode: MemoryMode, distill: Distiller = summarizer) -> list[Rule]:
    """UGC: propose one rule for each claim that experiences earned (candidates.py: only
    adoptions that improved count, and experiences saying the same make one rule listing every
    source), then rebuild hot memory."""
    if mode != MemoryMode.READ_WRITE:
        return []
    proposed = []
    for group in earned_by_claim(team, rule_candidates(team)):
        lead, evidence = group[0], evidence_for(team, group)
        experience = Experience(lead.item.key, lead.item.text, summarize(group, evidence))
        wording, how = distill(experience, evidence)
        proposed.append(rule_propose(team=team, source_key=lead.item.key, wording=wording,
                                     evidence={**evidence, "distilled_by": how}))  # fmt: skip
    # The stage's credit and frequencies just moved priorities: rebuild hot memory and record
    # what entered or left.
    hot_memory_refresh(team=team, cause="consolidation after a scored stage")
    return proposed


def record_hot_memory_use(team: Team, used_rule_ids: set[int], *, mode: MemoryMode) -> None:
    """Once per stage: freq <- (1 - beta) freq + beta * used for every resident rule. Resident
    is hot memory as rebuilt now, what the agent's context is built from; an approved rule that
    is not resident was never in context, so its frequency stays as it was."""
    if mode != MemoryMode.READ_WRITE:
        return
    beta = settings.KOPE_HOT_FREQUENCY_BETA
    with transaction.atomic():
        resident = [version.rule_id for version in hot_memory(team)]
        rules = Rule.objects.filter(pk__in=resident, status=Rule.Status.APPROVED)
        for rule in rules.select_for_update():
            rule.frequency = next_frequency(rule.frequency, rule.pk in used_rule_ids, beta)
            rule.save(update_fields=["frequency"])
