"""The experience forest as a policy reads it, without a database: the Tools a policy is given,
over cases a test writes as values (the CaseView values apps/memory/case_views.py makes from
the forest), each with the candidate it was proposed as. The policy's own input, not a stand-in
for the loop: the loop's tools give it the same values from PostgreSQL (tests/runs/ drives the
policies through the real loop)."""

from __future__ import annotations

import functools
import itertools

from apps.agents.policy import Candidate
from apps.memory.case_views import CaseView
from apps.memory.retrieval import Hit
from apps.operators.builtin_suite import read_builtin_suite

TARGET = "cpu-c"


@functools.cache
def builtin_families() -> dict[str, str]:
    return {folder.spec.slug: folder.spec.family for folder in read_builtin_suite()}


def version_id(slug: str) -> int:
    """The id of a built-in operator's version in these tests: one per operator."""
    return list(builtin_families()).index(slug) + 1


class CaseBook:
    """Cases in memory, read as the loop's tools read the forest."""

    def __init__(self) -> None:
        self.cases: dict[int, CaseView] = {}
        self.proposals: dict[int, Candidate] = {}
        # Ids far from the small ones a test gives an incumbent that memory does not hold.
        self.case_ids = itertools.count(1001)
        self.session_ids = itertools.count(1)
        self.notes: list[tuple[str, str]] = []

    def new_session(self) -> int:
        return next(self.session_ids)

    def record(self, *, session_id: int, slug: str, iteration: int, strategy: str,
               outcome: str, correct: bool = True, latency_ms: float | None = None,
               parent_id: int | None = None, source: str | None = None,
               speedup_vs_parent: float | None = None, same_binary: bool = False,
               proposed: Candidate | None = None) -> int:  # fmt: skip
        """A case as a `case_recorded` event makes it; `proposed`, the candidate its
        `candidate_proposed` event named (flags and threads), where one did."""
        parent = self.cases[parent_id] if parent_id is not None else None
        case = CaseView(
            id=next(self.case_ids), session_id=session_id, version_id=version_id(slug),
            operator=slug, family=builtin_families()[slug], target=TARGET, iteration=iteration,
            parent_id=parent_id, strategy=strategy, source=source,
            parent_source=parent.source if parent is not None else None, outcome=outcome,
            correct=correct, latency_ms=latency_ms, speedup_vs_parent=speedup_vs_parent,
            same_binary=same_binary,
        )  # fmt: skip
        self.cases[case.id] = case
        if proposed is not None:
            self.proposals[case.id] = proposed
        return case.id

    # --- the Tools a policy is given ---

    def search_memory(self, text: str, limit: int = 8) -> list[Hit]:
        return []  # what memory brought back, the situation carries

    def case(self, case_id: int) -> CaseView | None:
        return self.cases.get(case_id)

    def tree(self, case: CaseView) -> list[CaseView]:
        return sorted((c for c in self.cases.values() if (c.session_id, c.version_id, c.target)
                       == (case.session_id, case.version_id, case.target)),
                      key=lambda c: (c.iteration, c.id))  # fmt: skip

    def children(self, case: CaseView) -> list[CaseView]:
        return sorted((c for c in self.cases.values()
                       if c.parent_id == case.id and c.session_id == case.session_id),
                      key=lambda c: c.iteration)  # fmt: skip

    def proposed(self, case: CaseView) -> Candidate:
        if case.source is None:
            return Candidate("", case.strategy)
        return self.proposals.get(case.id, Candidate(case.source, case.strategy))

    def diagnose(self, candidate: Candidate, *, profile: bool, debug: bool) -> str:
        raise AssertionError("no policy under these tests runs a diagnostic")

    def note_tool(self, tool: str, summary: str) -> None:
        self.notes.append((tool, summary))

    def charge_model_call(self, model: str, usage: dict[str, int], attempts: int) -> None:
        raise AssertionError("no policy under these tests calls a model")

    def tokens_left(self) -> int:
        return 0


def hit(case_id: int, similarity: float = 0.8, text: str = "") -> Hit:
    """A retrieved case, as the loop's memory search returns it."""
    return Hit(key=f"case:{case_id}", kind="case", text=text, provenance={},
               scores={"similarity": similarity, "downstream": 0.0, "value": 0.0,
                       "rank_score": similarity})  # fmt: skip
