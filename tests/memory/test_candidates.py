"""UGC's candidates against the database, through consolidate: only adoptions that improved
earn a rule, the rule reads as a kernel engineer would write it with its evidence, and
experiences saying the same make one rule, never a second."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import User

from apps.accounts.roles import Role
from apps.memory.models import Rule
from apps.memory.rules import rule_veto
from apps.memory.selectors import rule_candidates_overview
from apps.memory.values import MemoryMode, consolidate
from tests.support.experiences import PARALLEL, Memory, adopted_on_three


def test_no_change_evidence_never_proposes_a_rule(memory: Memory) -> None:
    unchanged_source = memory.experience(outcome="no_change")
    adopted_on_three(memory, unchanged_source)  # its adoptions improved: its own case did not
    unchanged_adoptions = memory.experience()
    adopted_on_three(memory, unchanged_adoptions, "no_change")
    slower_adoptions = memory.experience("tile(loop=L0, size=32)")
    adopted_on_three(memory, slower_adoptions, "regressed")

    assert consolidate(memory.team, mode=MemoryMode.READ_WRITE) == []
    assert not Rule.objects.exists()


def test_only_the_adoptions_that_improved_count_toward_the_gate(memory: Memory) -> None:
    item = memory.experience()
    memory.adopted(item, "gemm", speedup=1.6)
    memory.adopted(item, "batched_matmul", speedup=1.7)
    memory.adopted(item, "matmul_bias_relu", "no_change", 1.0)  # a third operator, unimproved
    assert consolidate(memory.team, mode=MemoryMode.READ_WRITE) == []

    memory.adopted(item, "gelu", speedup=1.2)  # a third operator that improved
    (rule,) = consolidate(memory.team, mode=MemoryMode.READ_WRITE)
    evidence = rule.versions.get().evidence
    assert evidence["operators"] == ["batched_matmul", "gelu", "gemm"]
    assert evidence["speedups"] == [1.6, 1.7, 1.2]


def test_a_rule_reads_as_what_to_do_when_and_when_not_with_its_evidence(memory: Memory) -> None:
    item = memory.experience()
    adopted_on_three(memory, item)
    broke = memory.case("gelu", PARALLEL.replace("L0", "L1"), "incorrect", None)
    memory.case("gemm", "tile(loop=L0, size=32)", "regressed", 0.6)  # another strategy

    (rule,) = consolidate(memory.team, mode=MemoryMode.READ_WRITE)

    version = rule.versions.get()
    assert version.statement == (
        "Parallelize the outermost loop with OpenMP (static schedule). Expected speedup vs "
        "parent: median 1.90x (1.40x-2.60x) over 3 adoptions."
    )
    assert version.applies_when == (
        "matmul operators (large float32) on cpu-c; improved batched_matmul, gemm, matmul_bias_relu"
    )
    assert version.not_when == f"it broke correctness on gelu: incorrect (case {broke.pk})"
    assert version.evidence["failures"] == [
        {"case": broke.pk, "operator": "gelu", "outcome": "incorrect", "speedup_vs_parent": None}
    ]
    assert version.evidence["sources"] == [item.key]
    assert len(version.evidence["adoption_cases"]) == 3


def test_experiences_saying_the_same_become_one_rule_listing_every_source(memory: Memory) -> None:
    first = memory.experience(value=0.2)
    second = memory.experience(PARALLEL.replace("L0", "L2"), value=0.4)  # another loop id
    other_family = memory.experience(family="convolution")
    for item in (first, second, other_family):
        adopted_on_three(memory, item)

    rules = consolidate(memory.team, mode=MemoryMode.READ_WRITE)

    by_source = {rule.source_key: rule.versions.get().evidence for rule in rules}
    assert set(by_source) == {second.key, other_family.key}  # led by the higher V
    assert by_source[second.key]["sources"] == [second.key, first.key]
    assert by_source[second.key]["adoptions"] == 6
    assert by_source[other_family.key]["sources"] == [other_family.key]


def test_a_later_experience_restating_a_vetoed_rule_adds_nothing(
    memory: Memory, member: Callable[[Role | str], User]
) -> None:
    first = memory.experience()
    adopted_on_three(memory, first)
    (rule,) = consolidate(memory.team, mode=MemoryMode.READ_WRITE)
    rule_veto(rule=rule, user=member(Role.REVIEWER), reason="races on the output")

    later = memory.experience(PARALLEL.replace("L0", "L1"))
    adopted_on_three(memory, later)
    assert consolidate(memory.team, mode=MemoryMode.READ_WRITE) == []
    assert list(Rule.objects.values_list("source_key", flat=True)) == [first.key]

    different = memory.experience("tile(loop=L0, size=32)")  # says something else: its own rule
    adopted_on_three(memory, different)
    assert [r.source_key for r in consolidate(memory.team, mode=MemoryMode.READ_WRITE)] == [
        different.key
    ]


def test_the_overview_lists_each_rule_with_its_operators_and_sources(memory: Memory) -> None:
    first, second = memory.experience(value=0.2), memory.experience(value=0.4)
    adopted_on_three(memory, first)
    adopted_on_three(memory, second)
    memory.adopted(second, "gelu")
    (rule,) = consolidate(memory.team, mode=MemoryMode.READ_WRITE)

    assert rule_candidates_overview(memory.team) == [{
        "rule": rule.pk, "statement": rule.versions.get().statement, "status": "pending",
        "operators": 4, "sources": [second.key, first.key],
    }]  # fmt: skip
