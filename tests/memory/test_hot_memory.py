"""Hot memory: what entered and what was evicted, when and why, and the page that shows the
resident rules with the parts of their priority."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.hot import hot_memory_changes, hot_memory_refresh
from apps.memory.learning import Resident
from apps.memory.models import HotMemoryChange, MemoryVector, Rule
from apps.memory.rules import (
    Wording,
    hot_memory,
    rule_approve,
    rule_propose,
    rule_retire,
    rule_veto,
)
from apps.memory.values import MemoryMode, consolidate
from tests.factories import MembershipFactory

PLANTED = "<script>alert('planted')</script>"


# --- the diff, without the database ----------------------------------------------------------


def test_a_newcomer_that_outranks_a_resident_is_named_as_what_displaced_it() -> None:
    old = Resident("rule:1", value=0.1, frequency=0.5, tokens=40)  # priority 0.00125
    new = Resident("rule:9", value=0.5, frequency=0.5, tokens=40)  # priority 0.00625

    changes = hot_memory_changes({"rule:1"}, [old, new], [new], budget=60, departed={})

    assert [(c.key, c.change) for c in changes] == [("rule:9", "entered"), ("rule:1", "evicted")]
    assert changes[0].reason.startswith("priority 0.00625 (V 0.500 x frequency 0.500 / 40 tokens)")
    displaced = "displaced: priority 0.00125 < 0.00625 of rule 9 under a 60-token budget"
    assert changes[1].reason == displaced


def test_a_rule_longer_than_the_budget_and_one_no_longer_approved_say_so() -> None:
    long = Resident("rule:2", value=0.9, frequency=1.0, tokens=500)

    departed = {"rule:3": "vetoed by ana: only on one host"}
    changes = hot_memory_changes({"rule:2", "rule:3"}, [long], [], budget=100, departed=departed)

    assert [(c.key, c.reason) for c in changes] == [
        ("rule:2", "too long: 500 tokens > the 100-token budget"),
        ("rule:3", "vetoed by ana: only on one host"),
    ]


def test_an_unchanged_resident_set_records_nothing() -> None:
    kept = Resident("rule:4", value=0.3, frequency=0.2, tokens=10)
    assert hot_memory_changes({"rule:4"}, [kept], [kept], budget=100, departed={}) == []


# --- recorded by rule decisions and consolidation --------------------------------------------


def rule_with_value(team: Team, n: int, value: float, statement: str) -> Rule:
    MemoryVector.objects.create(kind="case", key=f"case:{n}", team=team, text=statement,
                                target="cpu-c", value=value)  # fmt: skip
    rule = rule_propose(team=team, source_key=f"case:{n}", evidence={},
                        wording=Wording(statement, "matmul-like loop nests"))  # fmt: skip
    Rule.objects.filter(pk=rule.pk).update(frequency=0.5)
    return Rule.objects.get(pk=rule.pk)


@pytest.fixture
def reviewer(team: Team) -> User:
    user: User = MembershipFactory(team=team, role=Role.REVIEWER).user
    return user


@pytest.fixture
def two_rules(team: Team, settings: object) -> tuple[Rule, Rule]:
    """A weak and a strong rule, each short enough for the budget, not both together."""
    weak = rule_with_value(team, 1, 0.1, "Unroll the inner loop by four")
    strong = rule_with_value(team, 2, 0.6, "Accumulate into the output row in i-p-j order")
    tokens = [r.versions.get().tokens for r in (weak, strong)]
    settings.KOPE_HOT_MEMORY_TOKENS = sum(tokens) - 1  # type: ignore[attr-defined]
    return weak, strong


def changes_of(team: Team) -> list[tuple[int, str, str]]:
    rows = HotMemoryChange.objects.filter(team=team).order_by("at", "pk")
    return [(c.rule_id, c.change, c.reason) for c in rows]


def test_approving_a_stronger_rule_evicts_the_weaker_one_with_the_reason(
    team: Team, two_rules: tuple[Rule, Rule], reviewer: User, settings: object
) -> None:
    weak, strong = two_rules
    budget = settings.KOPE_HOT_MEMORY_TOKENS  # type: ignore[attr-defined]
    rule_approve(rule=weak, user=reviewer, version_number=1)
    rule_approve(rule=strong, user=reviewer, version_number=1)

    recorded = changes_of(team)
    assert [(r, c) for r, c, _ in recorded] == [
        (weak.pk, "entered"), (strong.pk, "entered"), (weak.pk, "evicted")]  # fmt: skip
    weak_priority = 0.1 * 0.5 / weak.versions.get().tokens
    strong_priority = 0.6 * 0.5 / strong.versions.get().tokens
    assert recorded[2][2] == (
        f"displaced: priority {weak_priority:.3g} < {strong_priority:.3g} of rule {strong.pk} "
        f"under a {budget:,}-token budget"
    )
    last = HotMemoryChange.objects.filter(rule=weak).first()
    assert last is not None and last.cause == f"rule {strong.pk} v1 approved by {reviewer}"
    assert [v.rule_id for v in hot_memory(team)] == [strong.pk]


def test_a_veto_or_retirement_evicts_with_who_and_why_and_the_next_rule_enters(
    team: Team, two_rules: tuple[Rule, Rule], reviewer: User
) -> None:
    weak, strong = two_rules
    rule_approve(rule=weak, user=reviewer, version_number=1)
    rule_approve(rule=strong, user=reviewer, version_number=1)

    rule_veto(rule=strong, user=reviewer, reason="only true on one host")
    assert changes_of(team)[-2:] == [
        (weak.pk, "entered", changes_of(team)[-2][2]),
        (strong.pk, "evicted", f"vetoed by {reviewer}: only true on one host"),
    ]
    rule_retire(rule=weak, user=reviewer, comment="superseded")
    assert changes_of(team)[-1] == (weak.pk, "evicted", f"retired by {reviewer}: superseded")
    assert hot_memory(team) == []


def test_consolidation_records_a_displacement_when_values_move(
    team: Team, two_rules: tuple[Rule, Rule], reviewer: User
) -> None:
    weak, strong = two_rules
    rule_approve(rule=weak, user=reviewer, version_number=1)
    rule_approve(rule=strong, user=reviewer, version_number=1)
    MemoryVector.objects.filter(key="case:1").update(value=0.9)  # the weak one proved itself

    assert consolidate(team, mode=MemoryMode.READ_ONLY) == []
    assert changes_of(team)[-1][:2] == (weak.pk, "evicted")  # read-only rebuilt nothing
    consolidate(team, mode=MemoryMode.READ_WRITE)

    assert changes_of(team)[-2:][0][:2] == (weak.pk, "entered")
    evicted = changes_of(team)[-1]
    assert evicted[:2] == (strong.pk, "evicted")
    assert evicted[2].startswith("displaced: ") and f"of rule {weak.pk} under" in evicted[2]
    last = HotMemoryChange.objects.filter(rule=strong).first()
    assert last is not None and last.cause.startswith("consolidation")


def test_a_rebuild_that_changes_nothing_records_nothing(
    team: Team, two_rules: tuple[Rule, Rule], reviewer: User
) -> None:
    rule_approve(rule=two_rules[1], user=reviewer, version_number=1)
    before = HotMemoryChange.objects.count()
    assert hot_memory_refresh(team=team, cause="again") == []
    assert HotMemoryChange.objects.count() == before


# --- the page --------------------------------------------------------------------------------


def test_the_page_shows_residents_their_priority_parts_the_budget_and_evictions(
    team: Team, two_rules: tuple[Rule, Rule], reviewer: User,
    client_for: Callable[[Role], Client], settings: object,
) -> None:  # fmt: skip
    weak, strong = two_rules
    rule_approve(rule=weak, user=reviewer, version_number=1)
    rule_approve(rule=strong, user=reviewer, version_number=1)
    budget = settings.KOPE_HOT_MEMORY_TOKENS  # type: ignore[attr-defined]
    tokens = strong.versions.get().tokens

    page = client_for(Role.VIEWER).get(f"/t/{team.slug}/hot-memory/").content.decode()

    assert f"{tokens} of {budget} tokens used by 1 approved rule(s)" in page
    resident = page.split('id="residents"')[1].split("</table>")[0]
    assert f'data-rule="{strong.pk}"' in resident and f'data-rule="{weak.pk}"' not in resident
    assert "<td>0.600</td><td>0.500</td>" in resident  # V, frequency
    assert f'data-rule="{weak.pk}"' in page.split('id="waiting"')[1]
    assert f"displaced: priority {0.1 * 0.5 / weak.versions.get().tokens:.3g}" in page

    evicted = client_for(Role.VIEWER).get(f"/t/{team.slug}/hot-memory/?change=evicted")
    rows = evicted.content.decode().split('id="changes"')[1]
    assert "change-evicted" in rows and "change-entered" not in rows


def test_the_page_escapes_rule_wording_and_veto_reasons(
    team: Team, reviewer: User, client_for: Callable[[Role], Client]
) -> None:
    rule = rule_with_value(team, 5, 0.4, f"Tile by 32 {PLANTED}")
    rule_approve(rule=rule, user=reviewer, version_number=1)
    rule_veto(rule=rule, user=reviewer, reason=f"breaks odd tails {PLANTED}")
    other = rule_with_value(team, 6, 0.4, f"Unroll by 4 {PLANTED}")
    rule_approve(rule=other, user=reviewer, version_number=1)

    page = client_for(Role.VIEWER).get(f"/t/{team.slug}/hot-memory/").content.decode()

    assert PLANTED not in page
    assert "breaks odd tails &lt;script&gt;" in page and "Unroll by 4 &lt;script&gt;" in page


def test_another_teams_hot_memory_is_not_shown(
    team: Team, other_team: Team, client_for: Callable[[Role], Client]
) -> None:
    theirs = rule_with_value(other_team, 7, 0.5, "Their secret rule")
    their_reviewer = MembershipFactory(team=other_team, role=Role.REVIEWER).user
    rule_approve(rule=theirs, user=their_reviewer, version_number=1)

    page = client_for(Role.VIEWER).get(f"/t/{team.slug}/hot-memory/").content.decode()
    assert "Their secret rule" not in page and "No resident rules" in page
    assert client_for("outsider").get(f"/t/{team.slug}/hot-memory/").status_code == 404
