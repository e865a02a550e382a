"""Team-scoped lookups of cases and profiles: what a page or an API call may show of a team.

They return None for anything outside the team, so that each caller answers in its own terms
(a 404 page, the API's NotFound, an empty side of a comparison).

Also the reads of memory's shared value: a rule and the experience it was distilled from share
one identifier and one value score V (SAGE's UGC), held on the experience's MemoryVector; and
an experience's retrieval record, for its rule's cold-phase access frequency."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Q, QuerySet

from apps.accounts.models import Team
from apps.devices.models import Evaluation, Profile
from apps.memory.keys import id_in_key, rule_key
from apps.memory.models import Case, JournalEvent, MemoryVector, Rule

# What a strategy did wrong where it was tried: it broke the kernel, or it made it slower.
FAILED_OUTCOMES = (Case.Outcome.INCORRECT, Case.Outcome.REGRESSED)


def team_case(team: Team, case_id: int | None) -> Case | None:
    if case_id is None:
        return None
    return (
        Case.objects.filter(session__team=team, pk=case_id)
        .select_related("source", "version__operator", "session", "parent__source")
        .first()
    )


def team_profile(team: Team, profile_id: int) -> Profile | None:
    return Profile.objects.filter(evaluation__team=team, pk=profile_id).first()


def value_keys(keys: Iterable[str]) -> dict[str, str]:
    """For each item key, the key of the MemoryVector that holds its V: a rule's ("rule:7") is
    its source experience's, when that is in memory; every other item holds its own. ATU credit,
    hot-memory priority and retrieval ranking all go through here, so they read and write one V.
    """
    keys = list(dict.fromkeys(keys))
    rule_ids = {rule_id for key in keys if (rule_id := id_in_key(key, "rule")) is not None}
    sources = dict(Rule.objects.filter(pk__in=rule_ids).values_list("pk", "source_key"))
    held = set(MemoryVector.objects.filter(key__in=sources.values()).values_list("key", flat=True))
    shared = {rule_key(pk): source for pk, source in sources.items() if source in held}
    return {key: shared.get(key, key) for key in keys}


def shared_values(keys: Iterable[str]) -> dict[str, float]:
    """Each item's V as value_keys resolves it; 0.0 (where V starts) for an item not in memory."""
    holders = value_keys(keys)
    values = dict(MemoryVector.objects.filter(key__in=holders.values()).values_list("key", "value"))
    return {key: values.get(holder, 0.0) for key, holder in holders.items()}


def retrieval_record(team: Team, item: MemoryVector) -> tuple[int, int]:
    """(stages the item was retrieved in, eligible stages): the scored stages of the team's
    sessions that used memory, on the item's target, since the item could be retrieved. Both
    from the journal's stage_scored events, over the same stages (the item's `retrievals`
    counts only the stages that credited it)."""
    stages = JournalEvent.objects.filter(
        kind="stage_scored", session__team=team, created_at__gte=item.created_at
    ).exclude(session__memory_mode="off")
    if item.target:
        stages = stages.filter(session__target=item.target)
    retrieved = stages.filter(payload__retrieved__contains=[item.key]).count()
    return retrieved, stages.count()


def improving_adoptions(team: Team, keys: Iterable[str]) -> QuerySet[Case]:
    """The team's cases that adopted any of `keys` and came out a correct improvement over their
    parent: the adoptions that improved, which alone earn an experience its rule (an adoption
    that changed nothing or made the kernel slower is no evidence for it)."""
    adopted = Q()
    for key in keys:
        adopted |= Q(adopted__contains=[{"key": key}])
    if not adopted:
        return Case.objects.none()
    improved = Case.objects.filter(
        adopted, session__team=team, correct=True, outcome=Case.Outcome.IMPROVED
    )
    return improved.select_related("version__operator").order_by("pk")


def failed_attempts(team: Team, *, target: str, strategy_name: str) -> QuerySet[Case]:
    """The team's cases on `target` whose strategy label starts with `strategy_name` and that
    broke correctness or slowed the kernel down (callers compare the full strategy)."""
    tried = Case.objects.filter(session__team=team, target=target,
                                strategy__startswith=strategy_name)  # fmt: skip
    failed = tried.filter(outcome__in=FAILED_OUTCOMES)
    return failed.select_related("version__operator").order_by("pk")


def rule_sources(rule: Rule, evidence: dict[str, Any]) -> list[str]:
    """The experiences a rule was distilled from: its evidence's `sources` (a merged rule lists
    every one), else its source key."""
    listed = evidence.get("sources")
    return [str(key) for key in listed] if isinstance(listed, list) and listed else [
        rule.source_key]  # fmt: skip


def rule_candidates_overview(team: Team) -> list[dict[str, Any]]:
    """For each of the team's rules, newest first: its id, newest statement, status, the number
    of distinct operators its improving adoptions came from (of its sources or of the rule
    itself, counted now) and its source keys."""
    overview = []
    for rule in Rule.objects.filter(team=team).prefetch_related("versions").order_by("-pk"):
        latest = max(rule.versions.all(), key=lambda v: v.number, default=None)
        sources = rule_sources(rule, latest.evidence if latest else {})
        adoptions = improving_adoptions(team, [*sources, rule_key(rule.pk)])
        operators = set(adoptions.values_list("version__operator__slug", flat=True))
        overview.append({"rule": rule.pk, "statement": latest.statement if latest else "",
                         "status": rule.status, "operators": len(operators),
                         "sources": sources})  # fmt: skip
    return overview


def case_evaluation(team: Team, case: Case) -> Evaluation | None:
    """The evaluation the case's verdict came from (its id is in the case's feedback)."""
    evaluation_id = case.feedback.get("evaluation_id")
    if not isinstance(evaluation_id, int):
        return None
    return Evaluation.objects.filter(team=team, pk=evaluation_id).first()
