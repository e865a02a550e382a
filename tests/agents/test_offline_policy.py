"""The offline policy's choice: a fixed prior, moved by evidence only as far as it applies."""

from __future__ import annotations

from dataclasses import replace

from apps.agents.offline.evidence import LOWERINGS, Evidence, evidence_for
from apps.agents.offline.moves import flag_moves, move_of, moves, strategy_name
from apps.agents.offline.policy import OfflineSearchPolicy, walks_memory_worse
from apps.agents.offline.transforms import apply, strategy_from_label
from apps.agents.policy import Attempt, Candidate, OperatorBrief, Proposal, Situation
from apps.memory.retrieval import Hit
from apps.operators.builtin_suite import read_builtin_suite
from tests.support.case_book import CaseBook, hit, version_id


def naive(slug: str) -> str:
    return next(f for f in read_builtin_suite() if f.spec.slug == slug).naive_source


def improved_case(book: CaseBook, slug: str, strategy: str, speedup: float) -> Hit:
    """A case of `slug` whose `strategy` made its naive kernel `speedup` times faster."""
    session = book.new_session()
    start = book.record(session_id=session, slug=slug, iteration=0, strategy="starting kernel",
                        outcome="no_change", source=naive(slug), latency_ms=10.0)  # fmt: skip
    child = book.record(session_id=session, slug=slug, iteration=1, strategy=strategy,
                        outcome="improved", parent_id=start, latency_ms=10.0 / speedup,
                        speedup_vs_parent=speedup)  # fmt: skip
    return hit(child, text=f"{slug}: {strategy}")


def gemm_situation(retrieved: list[Hit]) -> Situation:
    return situation("gemm", "matmul", retrieved)


def situation(slug: str, family: str, retrieved: list[Hit]) -> Situation:
    """The first round of `slug` on its naive kernel, a case memory does not hold."""
    incumbent = Attempt(1, Candidate(naive(slug), "starting kernel"), "no_change", True, 80.0, "")
    brief = OperatorBrief(slug, slug, family, "", version_id(slug), 1e-3, 1e-3)
    return Situation(session_id=0, team_id=1, target="cpu-c", operator=brief,
                     stage="optimization", iteration=1, rounds_left=5, incumbent=incumbent,
                     latest=incumbent, tried=frozenset(), context=None,
                     retrieved=retrieved)  # fmt: skip


def propose(situation: Situation, book: CaseBook | None = None) -> Proposal:
    """What the offline policy proposes, reading memory from `book` (else an empty one)."""
    return OfflineSearchPolicy().propose(situation, book or CaseBook())


def chosen(situation: Situation, book: CaseBook) -> tuple[str, list[str]]:
    proposal = propose(situation, book)
    assert proposal.candidate is not None
    return strategy_name(proposal.candidate.strategy), [a["key"] for a in proposal.adopted]


def test_without_evidence_the_prior_decides(book: CaseBook) -> None:
    assert chosen(gemm_situation([]), book) == ("packed_gemm", [])


def test_a_big_win_on_a_kernel_unlike_this_one_does_not_outvote_the_prior(book: CaseBook) -> None:
    gelu_win = improved_case(book, "gelu", "flags(set=fast_math)", speedup=20.0)

    assert chosen(gemm_situation([gelu_win]), book) == ("packed_gemm", [])


def test_a_win_on_a_kernel_like_this_one_is_adopted(book: CaseBook) -> None:
    """Once the lowerings are tried, the prior's next move (accumulate_in_output) gives way."""
    batched_win = improved_case(book, "batched_matmul", "tile(loop=L1, size=32)", speedup=3.0)
    here = gemm_situation([batched_win])
    lowered = frozenset(c.strategy for c in moves(here, book)
                        if strategy_name(c.strategy) in LOWERINGS)  # fmt: skip
    here = replace(here, tried=lowered)
    assert chosen(replace(here, retrieved=[]), book)[0] == "accumulate_in_output"

    assert chosen(here, book) == ("tile", [batched_win.key])


def first_move(situation: Situation, book: CaseBook | None = None) -> str:
    proposal = propose(situation, book)
    assert proposal.candidate is not None
    return proposal.candidate.strategy


def test_on_a_streaming_kernel_the_parallel_loop_comes_before_float_reordering_flags() -> None:
    """gcc -O3 vectorizes vector_add already; gelu's erff is what -ffast-math vectorizes."""
    assert first_move(situation("vector_add", "elementwise", [])).startswith("omp_parallel_for(")
    assert first_move(situation("gelu", "activation", [])) == "flags(set=fast_math)"


def test_a_convolution_is_lowered_to_a_gemm_first() -> None:
    assert first_move(situation("conv2d", "convolution", [])) == ("im2col_gemm(kc=512, loop=L1)")


def test_attention_s_scores_are_computed_by_a_gemm_first() -> None:
    for slug in ("attention", "causal_attention"):
        assert first_move(situation(slug, "attention", [])) == ("dots_by_gemm(kc=512, loop=L2)")


def test_a_flag_set_s_record_speaks_for_that_set_and_a_rule_on_flags_for_every_set() -> None:
    assert move_of("flags(set=unroll_loops)") == "flags(set=unroll_loops)"
    assert move_of("tile(loop=L2, size=32)") == "tile"
    unrolled = Evidence("case:1", "flags(set=unroll_loops)", 1.0, 1.0, "unrolling paid")
    assert evidence_for("flags(set=unroll_loops)", [unrolled]) > 0
    assert evidence_for("flags(set=fast_math)", [unrolled]) == 0
    rule = Evidence("rule:7", "flags", 0.5, 1.0, "an approved rule on flags")
    assert evidence_for("flags(set=fast_math)", [rule]) > 0


def test_the_parallel_loop_goes_on_the_outermost_loop_first() -> None:
    """gather_rows: a parallel region on the inner loop forks and joins once per row."""
    assert first_move(situation("gather_rows", "indexing", [])) == (
        "omp_parallel_for(loop=L0, schedule=static)"
    )


def test_what_another_loop_of_this_very_kernel_did_is_no_evidence(book: CaseBook) -> None:
    inner = "omp_parallel_for(loop=L1, schedule=static)"
    inner_lost = improved_case(book, "gather_rows", inner, speedup=0.14)
    here = replace(situation("gather_rows", "indexing", [inner_lost]),
                   tried=frozenset({inner}))  # fmt: skip

    proposal = propose(here, book)

    assert proposal.candidate is not None
    assert proposal.candidate.strategy == "omp_parallel_for(loop=L0, schedule=static)"
    assert proposal.adopted == []


def test_a_flag_set_that_broke_this_operator_is_not_offered_again() -> None:
    sigmoid = situation("sigmoid", "activation", [])
    assert "flags(set=fast_math)" in [c.strategy for c in moves(sigmoid, CaseBook())]

    after_it_broke = replace(sigmoid, broke=frozenset({"flags(set=fast_math)"}))

    offered = [c.strategy for c in moves(after_it_broke, CaseBook())]
    assert "flags(set=fast_math)" not in offered and "flags(set=fp_contract)" in offered


def test_after_a_strategy_did_not_pay_on_a_loop_its_other_parameters_wait() -> None:
    """A tile of 64 right after a tile of 32 on the same loop regressed is a round spent on
    what was just learned; everything fresh comes first."""
    gemm = situation("gemm", "matmul", [])
    assert first_move(gemm) == "packed_gemm(kc=512, loop=L0)"

    after_one = replace(gemm, tried=frozenset({"packed_gemm(kc=512, loop=L0)"}))

    assert strategy_name(first_move(after_one)) != "packed_gemm"


def test_what_did_not_pay_on_this_very_source_waits_under_other_flags() -> None:
    """attention: interchange and a tile of 32 lost on the start; after -ffast-math the code
    is the same, and a tile of 64 on that loop is what was just learned too."""
    gemm = situation("gemm", "matmul", [])
    lost_here = replace(gemm, lost=frozenset({"packed_gemm(kc=512, loop=L0)"}))

    assert strategy_name(first_move(lost_here)) != "packed_gemm"


def test_a_flag_set_that_another_one_includes_is_not_offered() -> None:
    """-ffast-math includes -ffp-contract=fast: adding it after compiles the same binary."""
    plain = Candidate(naive("gelu"), "starting kernel")
    fast = Candidate(naive("gelu"), "flags(set=fast_math)", ("-ffast-math",))

    assert "flags(set=fp_contract)" in [
        c.strategy for c in flag_moves(plain, fast_math_allowed=True)
    ]
    assert "flags(set=fp_contract)" not in [
        c.strategy for c in flag_moves(fast, fast_math_allowed=True)
    ]


def lowered_attention() -> str:
    """attention's scores and its sums over values, each by one GEMM."""
    scores_by_gemm = apply(strategy_from_label("dots_by_gemm(kc=512, loop=L2)"),
                           naive("attention"))  # fmt: skip
    return apply(strategy_from_label("weighted_sums_by_gemm(kc=512, loop=L5)"), scores_by_gemm)


def test_attention_s_sums_over_values_are_computed_by_a_gemm_after_its_scores() -> None:
    start = situation("attention", "attention", [])
    assert start.incumbent is not None
    scores_by_gemm = apply(strategy_from_label("dots_by_gemm(kc=512, loop=L2)"),
                           naive("attention"))  # fmt: skip
    lowered = Candidate(scores_by_gemm, "dots_by_gemm(kc=512, loop=L2)")
    after_scores = replace(start, incumbent=replace(start.incumbent, candidate=lowered))

    assert first_move(after_scores) == "weighted_sums_by_gemm(kc=512, loop=L5)"


def test_attention_gets_its_threads_before_its_float_accumulators() -> None:
    """After its two GEMMs and -ffast-math, with interchange and a tile of 32 lost: each of
    its accumulators is a round, the private parallel region is 2x on two cores."""
    start = situation("attention", "attention", [])
    assert start.incumbent is not None
    fast = Candidate(lowered_attention(), "flags(set=fast_math)", ("-ffast-math",))
    after_fast_math = replace(
        start, incumbent=replace(start.incumbent, candidate=fast),
        lost=frozenset({"interchange(loop=L5)", "tile(loop=L5, size=32)"}),
    )  # fmt: skip

    assert first_move(after_fast_math) == "omp_parallel_private(loop=L0)"


def every_proposal(here: Situation) -> list[Candidate]:
    """What the policy proposes on `here`, one after another, until it has nothing left."""
    proposed: list[Candidate] = []
    while True:
        tried = frozenset(c.strategy for c in proposed)
        proposal = propose(replace(here, tried=tried))
        if proposal.candidate is None:
            return proposed
        proposed.append(proposal.candidate)


def test_a_kernel_this_operator_already_ran_is_not_proposed_again() -> None:
    """avg_pool2d, in a suite run: interchange(loop=L3) of the interchanged kernel is its
    parent again, and four rounds went to swapping the two loops back and forth."""
    start = situation("avg_pool2d", "pooling", [])
    assert start.incumbent is not None
    parent = start.incumbent.candidate
    swap = "interchange(loop=L3)"
    swapped = replace(parent, source=apply(strategy_from_label(swap), parent.source),
                      strategy=swap)  # fmt: skip
    after_swap = replace(start, incumbent=replace(start.incumbent, candidate=swapped))
    assert parent.kernel_key in [c.kernel_key for c in every_proposal(after_swap)]

    knowing_the_parent = replace(after_swap, evaluated=frozenset({parent.kernel_key,
                                                                  swapped.kernel_key}))  # fmt: skip

    assert parent.kernel_key not in [c.kernel_key for c in every_proposal(knowing_the_parent)]


def test_a_lowering_comes_before_what_memory_says_of_lesser_moves(book: CaseBook) -> None:
    """conv2d, in a suite run: avg_pool2d's interchange (1.73x, a kernel alike by its features)
    outranked im2col_gemm for four rounds, and conv2d ended 1.5x over its start where the
    lowering makes it 30x. Only evidence against the lowering itself puts it later."""
    interchange_won = improved_case(book, "avg_pool2d", "interchange(loop=L3)", speedup=1.73)

    assert first_move(situation("conv2d", "convolution", [interchange_won]), book) == (
        "im2col_gemm(kc=512, loop=L1)"
    )
    im2col_lost = improved_case(book, "avg_pool2d", "im2col_gemm(kc=512, loop=L1)", speedup=0.5)
    faulted = situation("conv2d", "convolution", [interchange_won, im2col_lost])
    assert first_move(faulted, book).startswith("interchange(")


def test_what_walks_memory_worse_comes_last() -> None:
    """Attention's `for j for e: acc[e] += p[j] * v[j*d + e]` interchanged runs j innermost,
    down v's columns (2x slower); tiled, it only runs shorter inner loops (1.2x slower). Each
    was the first round of an attention session. (Causal attention's j stops at i: no tile.)
    Its two GEMMs come first; their other slabs, worn then, come after the fresh moves but
    before these."""
    attention = [c.strategy for c in every_proposal(situation("attention", "attention",
                                                              []))]  # fmt: skip
    causal = [c.strategy for c in every_proposal(situation("causal_attention", "attention",
                                                           []))]  # fmt: skip

    assert attention[:3] == causal[:3] == ["dots_by_gemm(kc=512, loop=L2)",
                                           "weighted_sums_by_gemm(kc=512, loop=L6)",
                                           "flags(set=fast_math)"]  # fmt: skip
    assert attention[-4:] == ["interchange(loop=L6)", "tile(loop=L6, size=32)",
                              "tile(loop=L6, size=64)", "tile(loop=L6, size=16)"]  # fmt: skip
    worn = attention.index("dots_by_gemm(kc=128, loop=L2)")
    assert attention.index("omp_parallel_private(loop=L0)") < worn < len(attention) - 4
    assert causal[-1] == "interchange(loop=L6)"


def test_a_tile_that_reads_nothing_twice_comes_last() -> None:
    """avg_pool2d reads each window once: its output rows tiled ran 2x slower, and were the
    first round of its session with memory off (the prior ranks tiles before threads)."""
    pooling = [c.strategy for c in every_proposal(situation("avg_pool2d", "pooling", []))]
    tiles = [label for label in pooling if label.startswith("tile(")]

    assert pooling[0] == "flags(set=fast_math)"
    assert tiles and pooling[-len(tiles) :] == tiles
    assert pooling.index("omp_parallel_for(loop=L0, schedule=static)") < pooling.index(tiles[0])


def test_swapping_a_tiles_block_loops_comes_after_swapping_its_element_loops() -> None:
    """On transpose_2d's tiles the block loops' swap ran 0.67x and 0.86x, the element
    loops' swap 1.15x: the first only changes the order in which tiles are visited."""
    tiled = apply(strategy_from_label("tile(loop=L0, size=32)"), naive("transpose_2d"))
    assert walks_memory_worse("interchange(loop=L0)", tiled)
    assert not walks_memory_worse("interchange(loop=L2)", tiled)
    assert not walks_memory_worse("interchange(loop=L0)", naive("transpose_2d"))
    # and tiling an element loop again (0.89x) comes after the rest too
    assert walks_memory_worse("tile(loop=L2, size=32)", tiled)


def blank_choice(situation: Situation, book: CaseBook) -> tuple[str, list[str], str]:
    proposal = OfflineSearchPolicy(blank_prior=True).propose(situation, book)
    assert proposal.candidate is not None
    keys = [a["key"] for a in proposal.adopted]
    return proposal.candidate.strategy, keys, proposal.rationale


def test_a_blank_prior_tries_what_applies_in_a_seeded_random_order(book: CaseBook) -> None:
    """No written-in order: without memory the choice is the seed's, not the prior's packed
    GEMM every time, and the same seed makes the same choice again."""
    picks = {seed: blank_choice(replace(gemm_situation([]), seed=seed), book) for seed in range(8)}

    assert all(keys == [] and "untried, chosen at random" in why
               for _, keys, why in picks.values())  # fmt: skip
    assert len({strategy for strategy, _, _ in picks.values()}) > 2
    assert blank_choice(replace(gemm_situation([]), seed=3), book) == picks[3]


def test_with_a_blank_prior_memory_alone_decides(book: CaseBook) -> None:
    """A win recalled from a kernel like this one is what a blank prior follows, where the
    written-in prior lowers the GEMM first."""
    batched_win = improved_case(book, "batched_matmul", "tile(loop=L1, size=32)", speedup=3.0)
    here = gemm_situation([batched_win])

    for seed in range(4):
        strategy, keys, _ = blank_choice(replace(here, seed=seed), book)
        assert strategy_name(strategy) == "tile" and keys == [batched_win.key]
    assert chosen(here, book)[0] == "packed_gemm"


def test_with_a_blank_prior_memory_says_which_setting_of_a_move_to_try(book: CaseBook) -> None:
    """One parallel loop's dynamic schedule ran 40x slower, another's static one 2x faster:
    lumped together they would speak against parallel loops; apart, for the static one."""
    dynamic = improved_case(book, "sigmoid", "omp_parallel_for(loop=L0, schedule=dynamic)", 0.025)
    static = improved_case(book, "gelu", "omp_parallel_for(loop=L0, schedule=static)", 2.0)
    here = situation("relu", "activation", [dynamic, static])

    for seed in range(4):
        strategy, keys, _ = blank_choice(replace(here, seed=seed), book)
        assert strategy_name(strategy) == "omp_parallel_for" and "schedule=static" in strategy
        assert static.key in keys


def test_with_a_blank_prior_a_setting_that_paid_comes_before_an_untried_one(
    book: CaseBook,
) -> None:
    """Recalled: only a static schedule, which paid. An untried dynamic schedule borrowed all of
    its evidence and won half the draws (held out, the blank prior tried it on every elementwise
    operator and ran 10-20x slower)."""
    static = improved_case(book, "gelu", "omp_parallel_for(loop=L0, schedule=static)", 2.0)
    here = situation("relu", "activation", [static])

    for seed in range(6):
        strategy, _, _ = blank_choice(replace(here, seed=seed), book)
        assert strategy_name(strategy) == "omp_parallel_for" and "schedule=static" in strategy
