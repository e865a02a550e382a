"""ATU and UGC against the database: credit recorded as events, the gate, and read-only mode."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.hot import hot_memory_standings
from apps.memory.keys import rule_key
from apps.memory.models import JournalEvent, MemoryVector, Rule
from apps.memory.rules import Wording, hot_memory, rule_approve, rule_propose
from apps.memory.values import (
    MemoryMode,
    consolidate,
    record_hot_memory_use,
    stage_credit,
    value_history,
)
from apps.runs.models import OptimizationSession
from tests.support.experiences import Memory, adopted_on_three


@pytest.fixture
def session(team: Team) -> OptimizationSession:
    return OptimizationSession.objects.create(team=team, target="cpu-c")


def item(team: Team, key: str, **fields: object) -> MemoryVector:
    defaults = {"kind": "case", "text": f"tile the loops ({key})", "team": team, "target": "cpu-c",
                "family": "matmul", **fields}  # fmt: skip
    return MemoryVector.objects.create(key=key, **defaults)


def credit_stage(session: OptimizationSession, operator: str, adopted: list[str],
                 mode: MemoryMode = MemoryMode.READ_WRITE) -> JournalEvent | None:  # fmt: skip
    """The seed's optimization stage: 1 ms -> 0.6 ms, scored 0.4."""
    retrieved = ["case:a", "case:b", "case:c"]
    return stage_credit(
        session_id=session.pk, mode=mode, stage="optimization", operator=operator, score=0.4,
        retrieved=retrieved, adopted=adopted,
    )  # fmt: skip


def test_a_stage_credits_its_items_and_records_old_and_new_values(
    team: Team, session: OptimizationSession
) -> None:
    for key in ("case:a", "case:b", "case:c"):
        item(team, key)

    event = credit_stage(session, "gemm", ["case:a", "case:b"])

    assert event is not None and event.kind == "value_updated" and event.seq == 1
    updates = {i["key"]: (i["old"], round(i["new"], 6)) for i in event.payload["items"]}
    assert updates == {"case:a": (0.0, 0.2), "case:b": (0.0, 0.2), "case:c": (0.0, -0.1)}
    a = MemoryVector.objects.get(key="case:a")
    assert (a.retrievals, a.adoptions, a.adopted_operators) == (1, 1, ["gemm"])
    assert MemoryVector.objects.get(key="case:c").adoptions == 0

    credit_stage(session, "conv2d", ["case:a"])
    history = value_history("case:a")
    assert [(h["old"], round(h["new"], 6)) for h in history] == [(0.0, 0.2), (0.2, 0.3)]


def test_read_only_and_off_modes_write_nothing(team: Team, session: OptimizationSession) -> None:
    item(team, "case:a", value=0.5, adoptions=5, adopted_operators=["x", "y", "z"])
    before = (
        JournalEvent.objects.count(),
        list(MemoryVector.objects.values()),
        Rule.objects.count(),
    )

    for mode in (MemoryMode.READ_ONLY, MemoryMode.OFF):
        assert credit_stage(session, "gemm", ["case:a"], mode) is None
        assert consolidate(team, mode=mode) == []
        record_hot_memory_use(team, set(), mode=mode)

    after = (
        JournalEvent.objects.count(),
        list(MemoryVector.objects.values()),
        Rule.objects.count(),
    )
    assert after == before


@pytest.mark.parametrize(
    ("value", "improved_on", "proposed"),
    [
        (0.1, ["a", "b", "c"], True),
        (0.1, ["a", "b"], False),  # two improving adoptions
        (0.1, ["a", "a", "b"], False),  # on two operators
        (0.0, ["a", "b", "c"], False),
    ],
)
def test_consolidation_proposes_exactly_the_experiences_past_the_gate(
    memory: Memory, value: float, improved_on: list[str], proposed: bool
) -> None:
    operators = dict(zip("abc", ("gemm", "batched_matmul", "matmul_bias_relu"), strict=True))
    source = memory.experience(value=value)
    for name in improved_on:
        memory.adopted(source, operators[name])
    rules = consolidate(memory.team, mode=MemoryMode.READ_WRITE)
    assert bool(rules) is proposed
    if proposed:
        (rule,) = rules
        assert rule.status == "pending" and rule.source_key == source.key
        assert rule.versions.get().evidence["operators"] == sorted(operators.values())
        assert consolidate(memory.team, mode=MemoryMode.READ_WRITE) == []  # already has its rule


def test_an_approved_rule_enters_hot_memory_and_its_frequency_follows_use(
    memory: Memory, member: Callable[[Role | str], User]
) -> None:
    team = memory.team
    adopted_on_three(memory, memory.experience(value=0.4))
    (rule,) = consolidate(team, mode=MemoryMode.READ_WRITE)
    assert hot_memory(team) == []  # pending: not yet
    rule_approve(rule=rule, user=member(Role.REVIEWER), version_number=1)
    Rule.objects.filter(pk=rule.pk).update(frequency=0.5)

    assert [v.rule_id for v in hot_memory(team)] == [rule.pk]
    record_hot_memory_use(team, {rule.pk}, mode=MemoryMode.READ_WRITE)
    record_hot_memory_use(team, set(), mode=MemoryMode.READ_WRITE)
    rule.refresh_from_db()
    assert rule.frequency == pytest.approx((0.9 * 0.5 + 0.1) * 0.9)


def approved_rule(team: Team, key: str, value: float, statement: str, reviewer: User) -> Rule:
    item(team, key, value=value)
    rule = rule_propose(team=team, source_key=key, evidence={},
                        wording=Wording(statement, "matmul-like loops"))  # fmt: skip
    Rule.objects.filter(pk=rule.pk).update(frequency=0.5)
    return rule_approve(rule=rule, user=reviewer, version_number=1)


def test_a_resident_rule_adopted_in_failed_stages_loses_priority_through_its_shared_value(
    team: Team, session: OptimizationSession, member: Callable[[Role | str], User]
) -> None:
    rule = approved_rule(team, "case:a", 0.5, "Tile the k loop", member(Role.REVIEWER))
    key = rule_key(rule.pk)
    item(team, key, kind="rule")  # the rule's own searchable vector, as embed_rule writes it
    before = hot_memory_standings(team)[0]

    for n in range(3):
        stage_credit(session_id=session.pk, mode=MemoryMode.READ_WRITE, stage="correctness",
                     operator=f"op{n}", score=-0.1, retrieved=[key], adopted=[key])  # fmt: skip
        record_hot_memory_use(team, {rule.pk}, mode=MemoryMode.READ_WRITE)

    after = hot_memory_standings(team)[0]
    source = MemoryVector.objects.get(key="case:a")
    assert after.resident and after.value == source.value == pytest.approx(-0.1)
    assert after.priority < 0 < before.priority
    assert (source.retrievals, source.adoptions) == (3, 3)
    assert MemoryVector.objects.get(key=key).value == 0.0  # holds no V of its own
    assert [round(h["new"], 6) for h in value_history("case:a")] == [-0.1, -0.1, -0.1]


def test_an_experience_and_its_rule_adopted_in_one_stage_are_credited_once(
    team: Team, session: OptimizationSession, member: Callable[[Role | str], User]
) -> None:
    rule = approved_rule(team, "case:a", 0.0, "Tile the k loop", member(Role.REVIEWER))
    item(team, "case:b")

    event = stage_credit(session_id=session.pk, mode=MemoryMode.READ_WRITE, stage="optimization",
                         operator="gemm", score=0.4, retrieved=["case:a", rule_key(rule.pk),
                         "case:b"], adopted=["case:a", rule_key(rule.pk)])  # fmt: skip

    assert event is not None
    updates = {i["key"]: round(i["new"], 6) for i in event.payload["items"]}
    assert updates == {"case:a": 0.4, "case:b": -0.1}  # one adopted item: the whole score
    assert MemoryVector.objects.get(key="case:a").retrievals == 1


def test_only_resident_rules_frequencies_follow_use(
    team: Team, member: Callable[[Role | str], User], settings: object
) -> None:
    reviewer = member(Role.REVIEWER)
    resident = approved_rule(team, "case:a", 0.9, "Tile the k loop", reviewer)
    waiting = approved_rule(team, "case:b", 0.2, "Use restrict pointers " + "and more " * 40,
                            reviewer)  # fmt: skip
    settings.KOPE_HOT_MEMORY_TOKENS = resident.approved_version.tokens  # type: ignore[attr-defined]
    assert [v.rule_id for v in hot_memory(team)] == [resident.pk]

    for _ in range(7):
        record_hot_memory_use(team, set(), mode=MemoryMode.READ_WRITE)

    resident.refresh_from_db()
    waiting.refresh_from_db()
    assert resident.frequency == pytest.approx(0.5 * 0.9**7)
    assert waiting.frequency == 0.5  # evicted: never in context, so no evidence either way
