"""What a policy was offered and what it adopted (no database)."""

from __future__ import annotations

from apps.agents.assembly import Tried, lost_on_same_source, offered_and_adopted
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


def test_what_did_not_pay_on_the_incumbent_s_source_is_lost_whatever_its_flags() -> None:
    """attention's trail: interchange lost on the start; -ffast-math kept the start's source
    and won; its children see interchange as lost, a kernel with other code does not."""

    def case(pk: int, source: int, parent: int | None, outcome: str, strategy: str) -> Tried:
        return Tried(pk, parent, source, outcome, strategy)

    start = case(1, 10, None, "no_change", "starting kernel")
    trail = [
        start,
        case(2, 11, 1, "regressed", "interchange(loop=L6)"),
        case(3, 10, 1, "improved", "flags(set=fast_math)"),
        case(4, 12, 3, "no_change", "tile(loop=L6, size=32)"),
    ]
    lost = lost_on_same_source(trail, trail[2].case_id)
    assert lost == {"interchange(loop=L6)", "tile(loop=L6, size=32)"}
    tiled = case(5, 13, 3, "improved", "tile(loop=L6, size=64)")
    assert lost_on_same_source([*trail, tiled], tiled.case_id) == frozenset()
