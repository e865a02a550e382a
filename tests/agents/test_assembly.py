"""What a policy was offered and what it adopted (no database)."""

from __future__ import annotations

from apps.agents.assembly import offered_and_adopted
from apps.agents.policy import Candidate, OperatorBrief, Proposal, Situation
from apps.memory.retrieval import Hit


def situation(hits: list[str], rules: list[str]) -> Situation:
    brief = OperatorBrief(slug="gemm", name="GEMM", family="gemm", description="",
                          version_id=1, max_abs=1e-3, max_rel=1e-3)  # fmt: skip
    return Situation(
        session_id=1, team_id=1, target="cpu", operator=brief, stage="optimization",
        iteration=1, rounds_left=3, incumbent=None, latest=None, tried=frozenset(),
        context=None, retrieved=[Hit(key, "case", "", {}, {}) for key in hits],
        hot_rules=[{"key": key} for key in rules],
    )  # fmt: skip


def test_the_items_offered_are_the_context_s_then_those_the_policy_searched_for() -> None:
    proposal = Proposal(Candidate("", "tile"), retrieved=["case:3", "case:9"])

    offered, _ = offered_and_adopted(situation(["case:1", "case:3"], ["rule:2"]), proposal)

    assert offered == ["case:1", "case:3", "rule:2", "case:9"]


def test_an_adoption_of_an_item_the_policy_never_had_is_dropped() -> None:
    adopted = [{"key": "rule:2", "why": "hot"}, {"key": "case:7", "why": "made up"},
               {"key": "case:9", "why": "searched"}, {"why": "no key"}]  # fmt: skip
    proposal = Proposal(Candidate("", "tile"), adopted=adopted, retrieved=["case:9"])

    _, kept = offered_and_adopted(situation(["case:1"], ["rule:2"]), proposal)

    assert kept == [{"key": "rule:2", "why": "hot"}, {"key": "case:9", "why": "searched"}]
