"""Replaying a retrieved path: what took a similar operator several rounds, in one candidate."""

from __future__ import annotations

import math
import os
from dataclasses import replace

from apps.agents.offline.moves import FLAG_SETS, label_params, moves
from apps.agents.offline.policy import OfflineSearchPolicy
from apps.agents.offline.replay import paths, replay_label, steps_of
from apps.agents.offline.transforms import apply, strategy_from_label
from apps.agents.policy import Attempt, Candidate, OperatorBrief, Proposal, Situation
from apps.memory.retrieval import Hit
from apps.operators.builtin_suite import read_builtin_suite
from tests.support.case_book import CaseBook, hit, version_id

LOWERED = "dots_by_gemm(kc=512, loop=L2)"  # attention's scores by one GEMM, its first round
WEIGHTED = "weighted_sums_by_gemm(kc=512, loop=L5)"  # its sums over values by one, the second
ATTENTION_PATH = [LOWERED, WEIGHTED, "flags(set=fast_math)", "float_accumulator(loop=L3)",
                  "omp_parallel_private(loop=L0)"]  # fmt: skip


def naive(slug: str) -> str:
    return next(f for f in read_builtin_suite() if f.spec.slug == slug).naive_source


class Tree:
    """One operator's cases in one session: a start, then children of the incumbent."""

    def __init__(self, book: CaseBook, slug: str) -> None:
        self.book, self.slug = book, slug
        self.session = book.new_session()
        self.iteration, self.latency = 0, 100.0
        self.start = self.record("starting kernel", "no_change", self.latency, source=naive(slug))
        self.incumbent = self.start

    def grow(self, strategy: str, speedup: float) -> int:
        """A child of the incumbent `speedup` times faster; it replaces it when faster."""
        latency = self.latency / speedup
        outcome = "improved" if speedup > 1 else "regressed"
        case = self.record(strategy, outcome, latency, parent_id=self.incumbent,
                           speedup_vs_parent=speedup)  # fmt: skip
        if outcome == "improved":
            self.incumbent, self.latency = case, latency
        return case

    def record(self, strategy: str, outcome: str, latency: float, *,
               parent_id: int | None = None, source: str | None = None,
               speedup_vs_parent: float | None = None) -> int:  # fmt: skip
        case = self.book.record(session_id=self.session, slug=self.slug,
                                iteration=self.iteration, strategy=strategy, outcome=outcome,
                                latency_ms=latency, parent_id=parent_id, source=source,
                                speedup_vs_parent=speedup_vs_parent)  # fmt: skip
        self.iteration += 1
        return case


def attention_tree(book: CaseBook) -> tuple[Tree, int]:
    """attention's path to its best kernel, and a regressed try off it (the retrieved one)."""
    tree = Tree(book, "attention")
    tree.grow(ATTENTION_PATH[0], 2.5)
    tree.grow(ATTENTION_PATH[1], 1.5)
    tree.grow(ATTENTION_PATH[2], 2.4)
    off_path = tree.grow("interchange(loop=L5)", 0.5)
    tree.grow(ATTENTION_PATH[3], 1.06)
    tree.grow(ATTENTION_PATH[4], 4.0)
    return tree, off_path


def lowered(slug: str) -> str:
    """The kernel after its first two rounds, which lower the scores and the sums over values
    to GEMMs (a lowering not made does not let a path that lacks it be replayed)."""
    return apply(strategy_from_label(WEIGHTED), apply(strategy_from_label(LOWERED), naive(slug)))


def at_start_of(book: CaseBook, slug: str, retrieved: list[Hit], start: str = "") -> Situation:
    """The first round of `slug`, on its naive kernel or on `start` as if it were that."""
    here = Tree(book, slug)
    incumbent = Attempt(here.start, Candidate(start or naive(slug), "starting kernel"),
                        "no_change", True, 100.0, "")  # fmt: skip
    brief = OperatorBrief(slug, slug, "attention", "", version_id(slug), 1e-3, 1e-3)
    return Situation(session_id=here.session, team_id=1, target="cpu-c",
                     operator=brief, stage="optimization", iteration=1, rounds_left=4,
                     incumbent=incumbent, latest=incumbent, tried=frozenset(), context=None,
                     retrieved=retrieved)  # fmt: skip


def propose(situation: Situation, book: CaseBook) -> Proposal:
    proposal = OfflineSearchPolicy().propose(situation, book)
    assert proposal.candidate is not None
    return proposal


def test_a_similar_operator_s_path_is_replayed_on_the_start_as_one_candidate(
    book: CaseBook,
) -> None:
    tree, retrieved = attention_tree(book)

    proposal = propose(at_start_of(book, "causal_attention", [hit(retrieved)]), book)

    expected = naive("causal_attention")
    for step in ATTENTION_PATH:
        if not step.startswith("flags("):
            expected = apply(strategy_from_label(step), expected)
    candidate = proposal.candidate
    assert candidate is not None
    assert candidate.strategy == replay_label(tree.incumbent, ATTENTION_PATH)
    assert candidate.source == expected
    assert candidate.flags == ("-ffast-math",)
    assert candidate.threads == (os.cpu_count() or 1)
    assert [a["key"] for a in proposal.adopted] == [f"case:{retrieved}"]
    assert "attention's best kernel" in proposal.adopted[0]["why"]
    assert "the 5 steps that apply here gained 38.16x there" in proposal.adopted[0]["why"]


def test_a_path_is_only_replayed_from_the_start(book: CaseBook) -> None:
    _, retrieved = attention_tree(book)
    start = at_start_of(book, "causal_attention", [hit(retrieved)])
    assert start.incumbent is not None
    later = Tree(book, "causal_attention")
    later_case = later.grow("restrict_pointers()", 1.1)

    moved_on = replace(start, incumbent=replace(start.incumbent, case_id=later_case))

    candidate = propose(moved_on, book).candidate
    assert candidate is not None and not candidate.strategy.startswith("replay(")


def test_steps_that_do_not_apply_here_are_left_out_and_one_step_is_no_replay(
    book: CaseBook,
) -> None:
    """attention's tile of loop L5 (over values, after the lowering) has no loop to tile in
    causal_attention, whose keys stop at the query; a flag set that broke this operator is not
    replayed either."""
    tree = Tree(book, "attention")
    tree.grow(LOWERED, 2.0)
    tree.grow("tile(loop=L5, size=32)", 1.5)
    tree.grow(WEIGHTED, 1.5)
    tree.grow("flags(set=fast_math)", 2.0)
    best = tree.grow("float_accumulator(loop=L3)", 1.2)
    causal = at_start_of(book, "causal_attention", [hit(best)])

    proposal = propose(causal, book)
    assert proposal.candidate is not None
    assert steps_of(proposal.candidate.strategy) == [
        LOWERED,
        WEIGHTED,
        "flags(set=fast_math)",
        "float_accumulator(loop=L3)",
    ]
    assert "4 steps that apply here gained 7.20x there" in proposal.adopted[0]["why"]

    fast_math_broke = replace(causal, broke=frozenset({"flags(set=fast_math)"}))
    candidate = propose(fast_math_broke, book).candidate
    assert candidate is not None
    assert steps_of(candidate.strategy) == [LOWERED, WEIGHTED, "float_accumulator(loop=L3)"]

    only_the_tile_left = Tree(book, "attention")
    only_the_tile_left.grow(LOWERED, 2.0)
    tiled = only_the_tile_left.grow("tile(loop=L5, size=32)", 1.5)
    candidate = propose(at_start_of(book, "causal_attention", [hit(tiled)]), book).candidate
    assert candidate is not None and candidate.strategy == LOWERED  # one step: no replay


def test_a_path_through_a_replayed_kernel_lists_the_steps_it_applied(book: CaseBook) -> None:
    tree = Tree(book, "causal_attention")
    tree.grow(replay_label(1, ATTENTION_PATH[1:3]), 2.5)
    best = tree.grow(ATTENTION_PATH[3], 1.9)

    [path] = paths([hit(best)], session_id=0, version_id=0, tools=book)

    assert [step.label for step in path.steps] == ATTENTION_PATH[1:4]
    assert [round(step.gain, 3) for step in path.steps] == [0.458, 0.458, 0.642]  # ln 2.5 / 2
    assert path.best_case_id == best and path.operator == "causal_attention"
    assert round(path.speedup, 2) == 4.75


def test_the_tree_being_grown_and_a_tree_that_never_improved_give_no_path(book: CaseBook) -> None:
    grown = Tree(book, "attention")
    best = grown.grow("flags(set=fast_math)", 2.0)
    stuck = Tree(book, "attention")
    regressed = stuck.grow("interchange(loop=L6)", 0.5)

    assert (
        paths([hit(best)], session_id=grown.session, version_id=version_id("attention"), tools=book)
        == []
    )
    assert paths([hit(regressed)], session_id=0, version_id=0, tools=book) == []


def test_a_path_that_did_not_lower_a_matrix_product_does_not_stand_in_for_it(
    book: CaseBook,
) -> None:
    """row_sum's path helps logsumexp_rows; on matmul_bias_relu the packed GEMM comes first."""
    tree = Tree(book, "row_sum")
    tree.grow("flags(set=fast_math)", 2.5)
    best = tree.grow("omp_parallel_for(loop=L0, schedule=static)", 1.8)

    logsumexp = propose(at_start_of(book, "logsumexp_rows", [hit(best)]), book).candidate
    matmul = propose(at_start_of(book, "matmul_bias_relu", [hit(best)]), book).candidate

    assert logsumexp is not None and logsumexp.strategy.startswith("replay(")
    assert matmul is not None and matmul.strategy.startswith("packed_gemm(")


def test_a_parallel_step_becomes_the_private_region_where_the_loop_uses_scratch_buffers(
    book: CaseBook,
) -> None:
    """layernorm's parallel row loop, replayed on attention, whose head loop shares a row of
    scores: made parallel as it is, it races (it was incorrect in a suite run)."""
    tree = Tree(book, "layernorm")
    tree.grow("flags(set=fast_math)", 2.0)
    best = tree.grow("omp_parallel_for(loop=L0, schedule=static)", 1.8)

    attention = at_start_of(book, "attention", [hit(best)], start=lowered("attention"))
    candidate = propose(attention, book).candidate

    assert candidate is not None
    assert steps_of(candidate.strategy) == ["flags(set=fast_math)",
                                            "omp_parallel_private(loop=L0)"]  # fmt: skip
    assert candidate.source == apply(strategy_from_label("omp_parallel_private(loop=L0)"),
                                     lowered("attention"))  # fmt: skip


def test_a_step_on_a_loop_lands_on_the_loop_that_plays_its_role_here_or_nowhere(
    book: CaseBook,
) -> None:
    """scaled_softmax's L2 sums exponentials in float after its float accumulator. layernorm's
    L2 sums squares (the accumulator alone made it 4.5x slower in a suite run) and no loop of
    it sums a math call: the step is left out. attention sums exponentials in its L3 (after
    its scores were lowered to a GEMM)."""
    tree = Tree(book, "scaled_softmax")
    tree.grow("flags(set=fast_math)", 2.5)
    tree.grow("omp_parallel_for(loop=L0, schedule=static)", 4.0)
    best = tree.grow("float_accumulator(loop=L2)", 1.06)

    layernorm = propose(at_start_of(book, "layernorm", [hit(best)]), book).candidate
    attention = propose(at_start_of(book, "attention", [hit(best)],
                                    start=lowered("attention")), book).candidate  # fmt: skip

    assert layernorm is not None and attention is not None
    assert steps_of(layernorm.strategy) == [
        "flags(set=fast_math)",
        "omp_parallel_for(loop=L0, schedule=static)",
    ]
    assert steps_of(attention.strategy) == ["flags(set=fast_math)",
                                            "omp_parallel_private(loop=L0)",
                                            "float_accumulator(loop=L3)"]  # fmt: skip
    expected = lowered("attention")
    for step in steps_of(attention.strategy)[1:]:
        expected = apply(strategy_from_label(step), expected)
    assert attention.source == expected


ROW_SUM_PATH = ["flags(set=fast_math)", "omp_parallel_for(loop=L0, schedule=static)",
                "float_accumulator(loop=L1)"]  # fmt: skip
POOL_STEPS = ["omp_parallel_for(loop=L0, schedule=static)", "float_accumulator(loop=L4)"]


REPLAYED_ON_POOL = (ROW_SUM_PATH[0], *POOL_STEPS)


def pool_after_a_replay(book: CaseBook, retrieved: list[Hit], gained: float = 1.25,
                        steps: tuple[str, ...] = REPLAYED_ON_POOL) -> Situation:  # fmt: skip
    """avg_pool2d after row_sum's path (8x there) was replayed on it, -ffast-math and all (in
    a suite run the path made it 1.25x faster; the parallel loop alone made it 1.9x,
    -ffast-math alone 1.5x slower)."""
    best = row_sum_best(book)
    pool = Tree(book, "avg_pool2d")
    replayed = pool.grow(replay_label(best, list(steps)), gained)
    source, flags = naive("avg_pool2d"), set[str]()
    for step in steps:
        if step.startswith("flags("):
            flags |= set(FLAG_SETS[label_params(step)["set"]])
        else:
            source = apply(strategy_from_label(step), source)
    incumbent = Attempt(replayed, Candidate(source, "replayed", tuple(sorted(flags)), 2),
                        "improved", True, 80.0, "")  # fmt: skip
    return pool_situation(book, pool, incumbent, frozenset(), retrieved)


def row_sum_best(book: CaseBook) -> int:
    """row_sum's path to its best kernel, 8x over its start; the best case."""
    row_sum = Tree(book, "row_sum")
    for step in ROW_SUM_PATH:
        best = row_sum.grow(step, 2.0)
    return best


def pool_situation(book: CaseBook, pool: Tree, incumbent: Attempt, tried: frozenset[str],
                   retrieved: list[Hit]) -> Situation:  # fmt: skip
    brief = OperatorBrief("avg_pool2d", "avg_pool2d", "convolution", "", version_id("avg_pool2d"),
                          1e-3, 1e-3)  # fmt: skip
    return Situation(session_id=pool.session, team_id=1, target="cpu-c",
                     operator=brief, stage="optimization", iteration=2, rounds_left=3,
                     incumbent=incumbent, latest=incumbent, tried=tried, context=None,
                     retrieved=retrieved)  # fmt: skip


def test_a_flag_set_a_replayed_path_brought_in_is_taken_out_before_the_finer_tools(
    book: CaseBook,
) -> None:
    """Next after the path's strongest step alone, which takes the flags out with the rest."""
    replayed = pool_after_a_replay(book, retrieved=[])
    assert replayed.incumbent is not None
    head = book.cases[replayed.incumbent.case_id].strategy.partition(": ")[0]
    pool = replace(replayed, tried=frozenset({f"{head}: {POOL_STEPS[0]}"}))
    assert pool.incumbent is not None

    proposal = propose(pool, book)

    candidate = proposal.candidate
    assert candidate is not None
    assert candidate.strategy == "drop_flags(set=fast_math)"
    assert candidate.flags == () and candidate.threads == 2
    assert candidate.source == pool.incumbent.candidate.source
    assert proposal.adopted == []  # the prior's call: no memory item decided it

    tried = replace(pool, tried=pool.tried | {"drop_flags(set=fast_math)"})
    next_move = propose(tried, book).candidate
    assert next_move is not None and next_move.strategy != "drop_flags(set=fast_math)"


def test_a_flag_set_that_vectorizes_math_calls_is_taken_out_last(book: CaseBook) -> None:
    """softmax_rows after a path that brought -ffast-math: without it gcc cannot call the
    vector math library for expf, so taking it out comes after every finer tool."""
    steps = ROW_SUM_PATH[1:2]
    softmax = Tree(book, "softmax_rows")
    replayed = softmax.grow(replay_label(1, [ROW_SUM_PATH[0], *steps]), 7.0)
    source = naive("softmax_rows")
    for step in steps:
        source = apply(strategy_from_label(step), source)
    incumbent = Attempt(replayed, Candidate(source, "replayed", ("-ffast-math",), 2),
                        "improved", True, 6.0, "")  # fmt: skip
    brief = OperatorBrief("softmax_rows", "softmax_rows", "normalization", "",
                          version_id("softmax_rows"), 1e-3, 1e-3)  # fmt: skip
    situation = Situation(session_id=softmax.session, team_id=1, target="cpu-c",
                          operator=brief, stage="optimization", iteration=2, rounds_left=9,
                          incumbent=incumbent, latest=incumbent, tried=frozenset(),
                          context=None, retrieved=[])  # fmt: skip

    order = moves_in_order(situation, book)

    assert order.index("drop_flags(set=fast_math)") > order.index("restrict_pointers()")
    assert order.index("drop_flags(set=fast_math)") > order.index("flags(set=unroll_loops)")


def moves_in_order(situation: Situation, book: CaseBook) -> list[str]:
    """The strategies the policy proposes from one incumbent, each tried in turn."""
    return [candidate.strategy for candidate in proposed_in_turn(situation, book)]


def proposed_in_turn(situation: Situation, book: CaseBook) -> list[Candidate]:
    """The candidates the policy proposes from one incumbent, each tried in turn."""
    made: list[Candidate] = []
    while True:
        proposal = OfflineSearchPolicy().propose(situation, book)
        if proposal.candidate is None:
            return made
        made.append(proposal.candidate)
        situation = replace(situation, tried=situation.tried | {proposal.candidate.strategy})


def test_a_flag_set_the_kernel_took_on_its_own_is_not_taken_out(book: CaseBook) -> None:
    """Its own round timed it: it paid here."""
    pool = pool_after_a_replay(book, retrieved=[])
    assert pool.incumbent is not None
    own = Tree(book, "avg_pool2d")
    own.grow(POOL_STEPS[0], 1.9)
    with_flags = own.grow("flags(set=fast_math)", 1.1)

    timed_alone = replace(pool, incumbent=replace(pool.incumbent, case_id=with_flags))

    assert not [c for c in moves(timed_alone, book) if c.strategy.startswith("drop_flags(")]
    assert "drop_flags(set=fast_math)" in [c.strategy for c in moves(pool, book)]


def test_memory_that_a_flag_set_slowed_a_similar_kernel_is_adopted_to_take_it_out(
    book: CaseBook,
) -> None:
    earlier = Tree(book, "avg_pool2d")
    slowed = earlier.grow("flags(set=fast_math)", 0.67)
    pool = pool_after_a_replay(book, retrieved=[hit(slowed)])

    proposal = propose(pool, book)

    assert proposal.candidate is not None
    assert proposal.candidate.strategy == "drop_flags(set=fast_math)"
    [adopted] = proposal.adopted
    assert adopted["key"] == f"case:{slowed}"
    assert adopted["why"].startswith("took fast_math out: ")
    assert "slowed 0.67x with flags(set=fast_math)" in adopted["why"]


def test_a_flag_set_taken_out_again_is_no_step_of_the_path(book: CaseBook) -> None:
    tree = Tree(book, "avg_pool2d")
    tree.grow(replay_label(1, ["flags(set=fast_math)", *POOL_STEPS]), 1.25)
    best = tree.grow("drop_flags(set=fast_math)", 1.5)

    [path] = paths([hit(best)], session_id=0, version_id=0, tools=book)

    assert [step.label for step in path.steps] == POOL_STEPS
    assert round(path.speedup, 3) == 1.875


def test_a_replayed_path_that_gained_little_here_is_tried_again_with_fewer_steps(
    book: CaseBook,
) -> None:
    """1.25x here against 8x there: first the step the prior expects most of, the parallel
    loop, alone without the path's flags (what the suite run needed, and reached only after
    three rounds of the rest); then its flag set taken out; then each source step of the path
    left out in turn (the one the prior expects least of, the float accumulator, first); then
    the other step alone: all from the start, before the finer tools."""
    pool = pool_after_a_replay(book, retrieved=[])
    assert pool.incumbent is not None
    replayed = book.cases[pool.incumbent.case_id]
    head = replayed.strategy.partition(": ")[0]

    order = moves_in_order(pool, book)

    parallel_alone = f"{head}: {POOL_STEPS[0]}"
    fewer = [f"{head}: flags(set=fast_math); {POOL_STEPS[0]}",
             f"{head}: flags(set=fast_math); {POOL_STEPS[1]}",
             f"{head}: {POOL_STEPS[1]}"]  # fmt: skip
    assert order[:5] == [parallel_alone, "drop_flags(set=fast_math)", *fewer]
    assert order.index(fewer[-1]) < order.index("restrict_pointers()")
    made = {c.strategy: c for c in proposed_in_turn(pool, book)}
    naive_pool, cores = naive("avg_pool2d"), os.cpu_count() or 1
    parallel = apply(strategy_from_label(POOL_STEPS[0]), naive_pool)
    assert (made[parallel_alone].source, made[parallel_alone].flags) == (parallel, ())
    assert (made[fewer[0]].source, made[fewer[0]].flags) == (parallel, ("-ffast-math",))
    assert made[parallel_alone].threads == cores and made[fewer[2]].threads == 1
    accumulated = apply(strategy_from_label(POOL_STEPS[1]), naive_pool)
    assert made[fewer[2]].source == accumulated


def test_the_strongest_step_alone_comes_before_a_fresh_move_on_the_replayed_kernel(
    book: CaseBook,
) -> None:
    """A suite run replayed -ffast-math, the parallel loop and -funroll-loops on avg_pool2d
    (1.09x; the parallel loop alone made it 1.9x). The float accumulator, a fresh move the
    prior ranks above taking flags out, came next, read 1.02x on the slowed kernel and
    replaced the replay: the parallel loop alone was never tried."""
    steps = ("flags(set=fast_math)", POOL_STEPS[0], "flags(set=unroll_loops)")
    pool = pool_after_a_replay(book, retrieved=[], gained=1.09, steps=steps)
    assert pool.incumbent is not None
    head = book.cases[pool.incumbent.case_id].strategy.partition(": ")[0]
    assert any(move.startswith("float_accumulator(") for move in moves_in_order(pool, book))

    candidate = propose(pool, book).candidate

    assert candidate is not None and candidate.strategy == f"{head}: {POOL_STEPS[0]}"
    parallel = apply(strategy_from_label(POOL_STEPS[0]), naive("avg_pool2d"))
    assert (candidate.source, candidate.flags) == (parallel, ())


def test_a_replay_that_did_not_replace_the_start_is_taken_apart_like_one_that_did(
    book: CaseBook,
) -> None:
    """A suite run replayed cross_entropy's path on avg_pool2d for 0.98x, so the start stayed
    the incumbent; next came -ffast-math alone (0.55x), and only then the parallel loop alone
    (1.9x)."""
    pool = Tree(book, "avg_pool2d")
    label = replay_label(row_sum_best(book), list(REPLAYED_ON_POOL))
    pool.grow(label, 0.98)
    start = Attempt(pool.start, Candidate(naive("avg_pool2d"), "starting kernel", (), 1),
                    "no_change", True, 100.0, "")  # fmt: skip
    situation = pool_situation(book, pool, start, frozenset({label}), retrieved=[])

    candidate = propose(situation, book).candidate

    assert candidate is not None
    assert candidate.strategy == f"{label.partition(': ')[0]}: {POOL_STEPS[0]}"
    parallel = apply(strategy_from_label(POOL_STEPS[0]), naive("avg_pool2d"))
    assert (candidate.source, candidate.flags) == (parallel, ())


def test_a_replayed_path_that_gained_here_about_what_it_did_there_is_kept_whole(
    book: CaseBook,
) -> None:
    pool = pool_after_a_replay(book, retrieved=[], gained=5.0)

    assert not [c for c in moves_in_order(pool, book) if c.startswith("replay(")]


def test_a_path_through_a_replay_made_again_without_a_step_lists_the_steps_it_kept(
    book: CaseBook,
) -> None:
    tree = Tree(book, "avg_pool2d")
    tree.grow(replay_label(1, ["flags(set=fast_math)", *POOL_STEPS]), 1.25)
    best = tree.grow(replay_label(1, ["flags(set=fast_math)", POOL_STEPS[0]]), 1.5)

    [path] = paths([hit(best)], session_id=0, version_id=0, tools=book)

    assert [step.label for step in path.steps] == ["flags(set=fast_math)", POOL_STEPS[0]]
    assert round(path.speedup, 3) == 1.875
    assert [round(step.gain, 4) for step in path.steps] == [round(math.log(1.875) / 2, 4)] * 2
