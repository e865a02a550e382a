"""What an earlier session measured on this very kernel: the offline policy makes a kernel that
paid from it again first, does not try a loser again first, and replays the operator's own
earlier path from its start ahead of a path found on another operator."""

from __future__ import annotations

from dataclasses import replace

from apps.agents.offline.evidence import gather_evidence, measured_from_here, retrieved_cases
from apps.agents.offline.moves import moves
from apps.agents.offline.policy import OfflineSearchPolicy
from apps.agents.policy import Attempt, Candidate, OperatorBrief, Proposal, Situation
from apps.memory.retrieval import Hit
from tests.agents.test_replay import naive
from tests.support.case_book import CaseBook, hit, version_id

POOL_PARALLEL = "omp_parallel_for(loop=L0, schedule=static)"
FAMILIES = {"avg_pool2d": "convolution", "layernorm": "normalization", "gelu": "activation"}


class Run:
    """One operator in one session, each candidate made by the policy's own moves from the
    incumbent and recorded as the loop records it (proposed with its flags and threads, then
    its case)."""

    def __init__(self, book: CaseBook, slug: str) -> None:
        self.book, self.slug = book, slug
        self.session = book.new_session()
        self.iteration, self.latency = 0, 100.0
        self.kernel = Candidate(naive(slug), "starting kernel")
        self.case = self.record(self.kernel, "no_change", self.latency, parent=None)
        self.start = self.case

    def situation(self, retrieved: list[Hit] | None = None) -> Situation:
        incumbent = Attempt(self.case, self.kernel, "no_change", True, self.latency, "")
        brief = OperatorBrief(self.slug, self.slug, FAMILIES[self.slug], "", version_id(self.slug),
                              1e-3, 1e-3)  # fmt: skip
        return Situation(session_id=self.session, team_id=1, target="cpu-c",
                         operator=brief, stage="optimization", iteration=self.iteration,
                         rounds_left=4, incumbent=incumbent, latest=incumbent,
                         tried=frozenset(), context=None, retrieved=retrieved or [])  # fmt: skip

    def grow(self, strategy: str, speedup: float) -> int:
        """The move `strategy` of the incumbent, `speedup` times as fast; it becomes the
        incumbent when faster."""
        [made] = [c for c in moves(self.situation(), self.book) if c.strategy == strategy]
        latency = self.latency / speedup
        case = self.record(made, "improved" if speedup > 1 else "regressed", latency,
                           parent=self.case, speedup_vs_parent=speedup)  # fmt: skip
        if speedup > 1:
            self.case, self.kernel, self.latency = case, made, latency
        return case

    def record(self, kernel: Candidate, outcome: str, latency: float, parent: int | None,
               speedup_vs_parent: float | None = None) -> int:  # fmt: skip
        case = self.book.record(session_id=self.session, slug=self.slug,
                                iteration=self.iteration, strategy=kernel.strategy,
                                outcome=outcome, latency_ms=latency, parent_id=parent,
                                source=kernel.source, proposed=kernel,
                                speedup_vs_parent=speedup_vs_parent)  # fmt: skip
        self.iteration += 1
        return case


def propose(situation: Situation, book: CaseBook) -> Proposal:
    proposal = OfflineSearchPolicy().propose(situation, book)
    assert proposal.candidate is not None
    return proposal


def first_move(situation: Situation, book: CaseBook) -> str:
    candidate = propose(situation, book).candidate
    assert candidate is not None
    return candidate.strategy


def test_a_kernel_an_earlier_session_made_from_this_very_kernel_is_made_again_first(
    book: CaseBook,
) -> None:
    earlier = Run(book, "avg_pool2d")
    parallel = earlier.grow(POOL_PARALLEL, 1.99)
    now = Run(book, "avg_pool2d")
    assert first_move(now.situation(), book) == "flags(set=fast_math)", "the prior's first move"

    proposal = propose(now.situation([hit(parallel)]), book)

    assert proposal.candidate is not None
    assert proposal.candidate.kernel_key == earlier.kernel.kernel_key
    [adopted] = [a for a in proposal.adopted if a["key"] == f"case:{parallel}"]
    assert f"on this very kernel, in session {earlier.session}, ran 1.99x" in adopted["why"]


def test_a_kernel_that_lost_to_this_very_kernel_before_is_not_made_first(book: CaseBook) -> None:
    earlier = Run(book, "avg_pool2d")
    slowed = earlier.grow("flags(set=fast_math)", 0.63)

    now = Run(book, "avg_pool2d").situation([hit(slowed)])

    assert first_move(now, book) != "flags(set=fast_math)"


def test_the_same_source_under_other_flags_or_in_this_session_is_another_kernel(
    book: CaseBook,
) -> None:
    earlier = Run(book, "avg_pool2d")
    earlier.grow("flags(set=fast_math)", 1.2)
    parallel_with_flags = earlier.grow(POOL_PARALLEL, 1.9)
    now = Run(book, "avg_pool2d")
    own = now.grow("restrict_pointers()", 0.9)  # a loser of this session: it was tried

    both = now.situation([hit(parallel_with_flags), hit(own)])
    only_own = now.situation([hit(own)])

    assert measured_from_here(both, retrieved_cases(both.retrieved, book), book) == {}
    assert measured_from_here(only_own, retrieved_cases(only_own.retrieved, book), book) == {}


def test_the_operator_s_own_earlier_path_from_this_start_is_replayed_first(book: CaseBook) -> None:
    """avg_pool2d's own path (parallel loop, then -ffp-contract), retrieved with a low
    similarity, against layernorm's path, retrieved with a high one: layernorm's path gained
    more there, but avg_pool2d's gains were measured on this very kernel."""
    foreign = Run(book, "layernorm")
    foreign.grow("flags(set=fast_math)", 3.0)
    foreign_best = foreign.grow(POOL_PARALLEL, 1.6)
    earlier = Run(book, "avg_pool2d")
    earlier.grow(POOL_PARALLEL, 1.99)
    own_best = earlier.grow("flags(set=fp_contract)", 1.05)
    now = Run(book, "avg_pool2d")

    proposal = propose(now.situation([hit(foreign_best, 0.95), hit(own_best, 0.3)]), book)

    assert proposal.candidate is not None
    assert proposal.candidate.strategy.startswith(f"replay(case={own_best}): ")
    assert proposal.candidate.kernel_key == earlier.kernel.kernel_key
    [adopted] = proposal.adopted
    assert adopted["key"] == f"case:{own_best}"
    assert "took from this very kernel to its best" in adopted["why"]
    assert book.cases[own_best].parent_id is not None


def test_what_a_flag_set_did_to_this_very_source_under_other_flags_is_evidence(
    book: CaseBook,
) -> None:
    """gelu: an earlier session took -ffast-math out of the naive source again and ran 10x
    slower. The incumbent now is that source under other flags: not the kernel that was
    measured, but the same move on the same code."""
    earlier = Run(book, "gelu")
    earlier.grow("flags(set=fast_math)", 5.0)
    dropped = earlier.record(Candidate(naive("gelu"), "drop_flags(set=fast_math)"), "regressed",
                             earlier.latency * 10, parent=earlier.case,
                             speedup_vs_parent=0.1)  # fmt: skip
    now = Run(book, "gelu")
    now.grow("flags(set=fast_math)", 5.0)
    now.grow("flags(set=unroll_loops)", 1.1)
    here = now.situation([hit(dropped)])

    evidence = gather_evidence(here, retrieved_cases(here.retrieved, book))

    [drop] = [e for e in evidence if e.key == f"case:{dropped}"]
    assert drop.move == "drop_flags(set=fast_math)" and drop.says < 0
    assert "slowed 0.10x" in drop.why


def test_the_own_best_made_again_with_one_step_of_a_replay_is_replayed_first(
    book: CaseBook,
) -> None:
    """A warm suite run: the cold session replayed layernorm's path (-ffast-math, the parallel
    loop; 4.8x there) on avg_pool2d for 1.26x, then made it again with the parallel loop alone
    for 1.9x over the start, a child of the replay. Its one-step path from this very start is
    the operator's own: replayed first, ahead of the foreign path memory measured here at
    1.26x."""
    foreign = Run(book, "layernorm")
    foreign.grow("flags(set=fast_math)", 3.0)
    foreign_best = foreign.grow(POOL_PARALLEL, 1.6)
    cold = Run(book, "avg_pool2d")
    replay = propose(cold.situation([hit(foreign_best)]), book).candidate
    assert replay is not None and replay.strategy.startswith(f"replay(case={foreign_best})")
    replay_case = cold.record(replay, "improved", cold.latency / 1.26, parent=cold.start,
                              speedup_vs_parent=1.26)  # fmt: skip
    [alone] = [c for c in moves(cold.situation(), book) if c.strategy == POOL_PARALLEL]
    head = replay.strategy.partition(": ")[0]
    own_best = cold.record(replace(alone, strategy=f"{head}: {POOL_PARALLEL}"), "improved",
                           cold.latency / 1.9, parent=replay_case,
                           speedup_vs_parent=1.9 / 1.26)  # fmt: skip
    now = Run(book, "avg_pool2d")

    proposal = propose(now.situation([hit(foreign_best), hit(replay_case), hit(own_best)]), book)

    assert proposal.candidate is not None
    assert proposal.candidate.strategy == f"replay(case={own_best}): {POOL_PARALLEL}"
    assert proposal.candidate.kernel_key == alone.kernel_key
    assert any("took from this very kernel to its best" in a["why"] for a in proposal.adopted)
