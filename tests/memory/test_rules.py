"""The human gate: only reviewers decide, every decision is recorded, vetoes stick."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.core.errors import Conflict, DomainError, NotFound, PermissionDenied
from apps.memory.journal import journal_append
from apps.memory.models import MemoryVector, Rule, RuleTransition
from apps.memory.rules import (
    Wording,
    hot_memory,
    rule_approve,
    rule_edit,
    rule_propose,
    rule_reserve,
    rule_retire,
    rule_veto,
)
from apps.runs.models import OptimizationSession

TILING = Wording("Tile the k loop in blocks of 64 floats", "matmul-like loops over k >= 256")


def propose(team: Team, source: str, wording: Wording = TILING, value: float = 0.3) -> Rule:
    defaults = {"kind": "case", "text": source, "value": value, "team": team}
    MemoryVector.objects.update_or_create(key=source, defaults=defaults)
    evidence = {"cases": [source], "operators": ["gemm", "conv2d", "attention"]}
    return rule_propose(team=team, source_key=source, wording=wording, evidence=evidence)


@pytest.fixture
def reviewer(member: Callable[[Role | str], User]) -> User:
    return member(Role.REVIEWER)


def test_a_proposed_rule_waits_for_review_with_its_history(team: Team) -> None:
    rule = propose(team, "case:1")
    assert rule.status == "pending"
    assert [(t.from_status, t.to_status) for t in rule.transitions.all()] == [
        ("", "candidate"), ("candidate", "pending")]  # fmt: skip
    assert rule.versions.get().tokens > 0


@pytest.mark.parametrize("role", [Role.VIEWER, Role.ENGINEER, "outsider"])
def test_only_reviewers_and_admins_approve_veto_edit_or_retire(
    team: Team, member: Callable[[Role | str], User], role: Role | str
) -> None:
    rule = propose(team, "case:1")
    user = member(role)
    refused = NotFound if role == "outsider" else PermissionDenied
    for attempt in (
        lambda: rule_approve(rule=rule, user=user, version_number=1),
        lambda: rule_veto(rule=rule, user=user, reason="no"),
        lambda: rule_edit(rule=rule, user=user, wording=TILING),
        lambda: rule_retire(rule=rule, user=user),
        lambda: rule_reserve(rule=rule, user=user),
    ):
        with pytest.raises(refused):
            attempt()
    rule.refresh_from_db()
    assert rule.status == "pending" and rule.transitions.count() == 2


def test_approval_is_of_a_version_and_an_edit_goes_back_to_review(
    team: Team, reviewer: User
) -> None:
    rule = rule_approve(rule=propose(team, "case:1"), user=reviewer, version_number=1, comment="ok")
    assert rule.status == "approved" and rule.approved_version.number == 1

    version = rule_edit(rule=rule, user=reviewer, wording=Wording("Tile by 32", "small caches"))
    rule.refresh_from_db()
    assert version.number == 2 and rule.status == "pending"
    assert rule.versions.get(number=1).statement == TILING.statement  # immutable
    last = rule.transitions.last()
    assert (last.actor, last.to_status, last.version) == (reviewer, "pending", version)


def test_a_vetoed_rule_keeps_its_evidence_and_never_comes_back(team: Team, reviewer: User) -> None:
    rule = propose(team, "case:1")
    with pytest.raises(DomainError, match="a veto needs a reason"):
        rule_veto(rule=rule, user=reviewer, reason=" ")
    rule_veto(rule=rule, user=reviewer, reason="only true on AVX-512 hosts")

    again = propose(team, "case:1")  # consolidation proposes the same experience again
    assert again.pk == rule.pk and again.status == "vetoed"
    assert again.versions.get().evidence["cases"] == ["case:1"]
    assert again.transitions.last().comment == "only true on AVX-512 hosts"
    with pytest.raises(Conflict):
        rule_approve(rule=again, user=reviewer, version_number=1)
    assert hot_memory(team) == []


def test_two_reviewers_never_work_the_same_rule_unknowingly(
    team: Team, member: Callable[[Role | str], User]
) -> None:
    first, second = member(Role.REVIEWER), member(Role.ADMIN)
    rule = rule_reserve(rule=propose(team, "case:1"), user=first)
    with pytest.raises(Conflict, match=f"{first.username} is reviewing this rule"):
        rule_approve(rule=rule, user=second, version_number=1)
    approved = rule_approve(rule=rule, user=first, version_number=1)
    assert approved.status == "approved" and approved.reserved_by is None


def test_hot_memory_holds_approved_rules_by_priority_under_the_budget(
    team: Team, reviewer: User
) -> None:
    long_text = Wording("Unroll " + "and interleave " * 300, "reductions")
    strong = rule_approve(rule=propose(team, "case:1", value=0.9), user=reviewer, version_number=1)
    too_long = rule_approve(rule=propose(team, "case:2", long_text, value=0.9), user=reviewer,
                            version_number=1)  # fmt: skip
    pending = propose(team, "case:3", value=1.0)
    vetoed = rule_veto(rule=propose(team, "case:4", value=1.0), user=reviewer, reason="wrong")
    Rule.objects.filter(pk__in=[strong.pk, too_long.pk, pending.pk, vetoed.pk]).update(
        frequency=1.0
    )

    budget = strong.approved_version.tokens + 10
    chosen = hot_memory(team, budget_tokens=budget)

    assert [v.rule_id for v in chosen] == [
        strong.pk
    ]  # the long one does not fit; others are not approved
    assert sum(v.tokens for v in chosen) <= budget
    everything = hot_memory(team, budget_tokens=100_000)
    assert {v.rule_id for v in everything} == {strong.pk, too_long.pk}


def test_a_vetoed_rule_cannot_be_retired_into_review_and_back_into_hot_memory(
    team: Team, reviewer: User
) -> None:
    rule = rule_veto(rule=propose(team, "case:1"), user=reviewer, reason="wrong on AVX-512")

    with pytest.raises(Conflict, match="a vetoed rule stays vetoed: it cannot be retired"):
        rule_retire(rule=rule, user=reviewer)
    with pytest.raises(Conflict, match="vetoed"):
        rule_edit(rule=rule, user=reviewer, wording=TILING)

    rule.refresh_from_db()
    assert rule.status == "vetoed" and rule.versions.count() == 1
    assert rule.transitions.last().comment == "wrong on AVX-512"
    assert hot_memory(team) == []


def test_a_rule_retired_after_its_veto_before_the_fix_still_cannot_be_edited_or_approved(
    team: Team, reviewer: User
) -> None:
    rule = rule_veto(rule=propose(team, "case:1"), user=reviewer, reason="wrong on AVX-512")
    # What rule_retire used to allow: vetoed -> retired.
    RuleTransition.objects.create(rule=rule, from_status="vetoed", to_status="retired")
    Rule.objects.filter(pk=rule.pk).update(status="retired")

    with pytest.raises(Conflict, match=f"rule {rule.pk} was vetoed"):
        rule_edit(rule=rule, user=reviewer, wording=Wording("Unroll by 8", "matmul-like loops"))
    with pytest.raises(Conflict):
        rule_approve(rule=rule, user=reviewer, version_number=1)
    assert rule.versions.count() == 1 and hot_memory(team) == []


def test_an_approval_of_a_version_older_than_the_newest_is_refused_and_keeps_the_edit(
    team: Team, member: Callable[[Role | str], User]
) -> None:
    first, second = member(Role.REVIEWER), member(Role.REVIEWER)
    rule = propose(team, "case:1")
    rule_edit(rule=rule, user=second, wording=Wording("Tile by 32 only", "AVX2 hosts"))

    with pytest.raises(Conflict, match="version 2 was added since"):
        rule_approve(rule=rule, user=first, version_number=1)

    rule.refresh_from_db()
    assert rule.status == "pending" and rule.approved_version is None
    assert rule_approve(rule=rule, user=first, version_number=2).approved_version.number == 2
    with pytest.raises(Conflict, match="version 2 was added since"):
        rule_approve(rule=rule, user=first, version_number=1)  # nor rolls an approval back


def scored_stage(session: OptimizationSession, retrieved: list[str]) -> None:
    journal_append(session_id=session.pk, kind="stage_scored", payload={
        "operator": "gemm", "stage": "optimization", "score": 0.2, "retrieved": retrieved,
        "adopted": retrieved[:1]})  # fmt: skip


def test_a_proposed_rule_starts_with_the_share_of_eligible_stages_its_source_was_retrieved_in(
    team: Team, reviewer: User
) -> None:
    learning = OptimizationSession.objects.create(team=team, target="cpu-c")
    scored_stage(learning, [])  # before the experiences existed: not eligible
    for key in ("case:1", "case:2"):
        MemoryVector.objects.create(kind="case", key=key, text=key, team=team, target="cpu-c")
    for retrieved in (["case:2", "case:1"], ["case:2", "case:1"], ["case:2"], []):
        scored_stage(learning, retrieved)
    scored_stage(OptimizationSession.objects.create(team=team, target="cpu-c",
                                                    memory_mode="off"), [])  # fmt: skip
    scored_stage(OptimizationSession.objects.create(team=team, target="cuda"), [])

    weak = propose(team, "case:1", Wording("Use restrict pointers", "any loop"), value=0.01)
    strong = propose(team, "case:2", value=0.9)

    assert (weak.frequency, strong.frequency) == (0.5, 0.75)  # 2 and 3 of 4 stages
    for rule in (weak, strong):
        rule_approve(rule=rule, user=reviewer, version_number=1)
    room_for_one = max(r.versions.get().tokens for r in (weak, strong))
    assert [v.rule_id for v in hot_memory(team, budget_tokens=room_for_one)] == [strong.pk]
