"""vector_math: glibc's vector math library for kernels that -ffast-math breaks.

Sigmoid and SwiGLU compute 1 / (1 + expf(-x)). Under -ffast-math gcc assumes no infinities,
and for x below about -88 (expf overflows) the kernel returned NaN, so the search never had
their exponentials vectorized: 1.8x and 1.9x over naive where gelu, whose erff survives
-ffast-math, reached 17x. Declared `omp declare simd` and built with -fno-math-errno, the
same calls go to libmvec and the infinities stay.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from apps.agents.offline.moves import NO_MATH_ERRNO, culprits, moves
from apps.agents.offline.replay import steps_of
from apps.agents.offline.transforms import DECLARE_SIMD, Strategy, TransformError, apply
from apps.agents.policy import Attempt, Candidate
from apps.devices.cpu_c.build import compile_kernel
from apps.devices.evaluator import EvalSettings, evaluate_candidate
from apps.devices.services import operator_under_test
from apps.devices.symbols import imported_symbols
from apps.memory.retrieval import Hit
from tests.agents.test_offline_policy import improved_case, naive, propose, situation
from tests.factories import stored_builtin
from tests.support.case_book import CaseBook, hit

VECTOR_MATH = Strategy("vector_math")


def test_each_math_function_the_loops_call_is_declared_once() -> None:
    source = apply(VECTOR_MATH, naive("cross_entropy"))

    assert source.count(DECLARE_SIMD) == 2
    assert f"{DECLARE_SIMD}\nfloat expf(float);" in source
    assert f"{DECLARE_SIMD}\ndouble log(double);" in source
    assert source.index("float expf(float);") < source.index("int kope_kernel(")
    with pytest.raises(TransformError, match="no loop calls a math function libmvec has"):
        apply(VECTOR_MATH, source)


def test_a_kernel_without_a_call_libmvec_has_is_left_alone() -> None:
    """layernorm's only call is sqrt, one instruction that needs no library."""
    with pytest.raises(TransformError, match="no loop calls a math function libmvec has"):
        apply(VECTOR_MATH, naive("layernorm"))


def test_sigmoid_calls_the_vector_expf_and_keeps_its_infinities(db: None) -> None:
    source = apply(VECTOR_MATH, naive("sigmoid"))
    flags = (NO_MATH_ERRNO,)

    vector_calls = [s for s in imported_symbols(compile_kernel(source, flags).path)
                    if s.startswith("_ZGV") and s.endswith("_expf")]  # fmt: skip
    options = EvalSettings(seeds=2, timing=False, extra_flags=flags)
    verdict = evaluate_candidate(operator_under_test(stored_builtin("sigmoid")), source, options)

    assert vector_calls, "gcc did not call libmvec's expf"
    assert verdict["status"] == "correct", verdict.get("correct")
    cases = verdict["correct"]["cases"]
    assert any(c["case_id"] == "huge_values" and c["passed"] for c in cases)  # expf overflows


def sigmoid_move(incumbent: Candidate) -> Candidate | None:
    attempt = Attempt(1, incumbent, "no_change", True, 50.0, "")
    offered = moves(replace(situation("sigmoid", "activation", []), incumbent=attempt), CaseBook())
    return next((c for c in offered if c.strategy == "vector_math()"), None)


def test_the_move_brings_no_math_errno_and_skips_kernels_built_with_fast_math() -> None:
    plain = sigmoid_move(Candidate(naive("sigmoid"), "starting kernel"))
    fast = sigmoid_move(Candidate(naive("sigmoid"), "flags", ("-ffast-math",)))

    assert plain is not None and plain.flags == (NO_MATH_ERRNO,)
    assert fast is None  # math.h declares the vector versions then: the same binary


def test_where_fast_math_broke_the_kernel_vector_math_comes_next() -> None:
    broken = frozenset({"flags(set=fast_math)"})
    here = replace(situation("sigmoid", "activation", []), tried=broken, broke=broken)

    proposal = propose(here)

    assert proposal.candidate is not None
    assert proposal.candidate.strategy == "vector_math()"
    assert proposal.candidate.flags == (NO_MATH_ERRNO,)


def test_after_a_replay_with_fast_math_broke_the_kernel_its_steps_do_not_come_alone_first() -> None:
    """sigmoid in a suite run: gelu's path (-ffast-math and the parallel loop), replayed on the
    start, broke it. The next round tried -ffast-math alone, which broke it the same way, and
    the parallel loop no longer fit in the five rounds (0.72x against memory off)."""
    replayed = ("replay(case=160): flags(set=fast_math); "
                "omp_parallel_for(loop=L0, schedule=static)")  # fmt: skip
    failed = frozenset({replayed})
    here = replace(situation("sigmoid", "activation", []), tried=failed, broke=failed)

    proposal = propose(here)

    assert proposal.candidate is not None
    assert proposal.candidate.strategy == "vector_math()"


# gelu's path as a suite run recorded it
GELU_PATH = ("replay(case=43): flags(set=fast_math); omp_parallel_for(loop=L0, "
             "schedule=static); flags(set=unroll_loops)")  # fmt: skip


def offered_after_the_failed_replay(slug: str, family: str) -> set[str]:
    """What the offline policy offers on `slug`'s kernel a round after gelu's path broke it."""
    vectorized = Candidate(apply(VECTOR_MATH, naive(slug)), "vector_math()", (NO_MATH_ERRNO,))
    incumbent = Attempt(2, vectorized, "improved", True, 50.0, "")
    here = replace(situation(slug, family, []), incumbent=incumbent,
                   broke=frozenset({GELU_PATH}))  # fmt: skip
    return {c.strategy for c in moves(here, CaseBook())}


def test_a_flag_set_in_a_replay_that_broke_an_elementwise_map_is_not_offered_again() -> None:
    """sigmoid in the next suite run: after gelu's path broke it, vector_math made it faster,
    and on that kernel -ffast-math alone broke it again in round 3: the parallel loop, the
    path's only other step, computes each element as the serial loop does."""
    offered = offered_after_the_failed_replay("sigmoid", "activation")

    assert "flags(set=fast_math)" not in offered
    assert "omp_parallel_for(loop=L0, schedule=static)" in offered


def test_a_hoisted_division_can_change_a_result_too() -> None:
    """A reciprocal product rounds differently from the division it replaced: with -ffast-math
    in the same path, either step may have broken an elementwise map."""
    path = "replay(case=7): flags(set=fast_math); hoist_invariant(loop=L0); omp_simd(loop=L0)"

    assert culprits(path, naive("sigmoid")) == steps_of(path)
    assert culprits(GELU_PATH, naive("sigmoid")) == ["flags(set=fast_math)"]


def test_where_a_loop_reduces_the_replay_s_other_steps_may_have_broken_it() -> None:
    """On a row reduction a parallel loop can race or reorder sums: the flag set stays."""
    incumbent = Attempt(2, Candidate(naive("row_sum"), "starting kernel"), "no_change", True,
                        50.0, "")  # fmt: skip
    here = replace(situation("row_sum", "reduction", []), incumbent=incumbent,
                   broke=frozenset({GELU_PATH}))  # fmt: skip

    assert "flags(set=fast_math)" in {c.strategy for c in moves(here, CaseBook())}


def test_only_the_flag_set_of_a_replay_that_broke_an_elementwise_map_is_blamed(
    book: CaseBook,
) -> None:
    """Blamed too, sigmoid's static parallel loop came after the fresh moves and its dynamic
    schedule, which gelu's parallel loop spoke for as well, ran 7x slower than the start."""
    gelu_parallel = improved_case(book, "gelu", "omp_parallel_for(loop=L0, schedule=static)", 8.0)
    failed = frozenset({GELU_PATH})
    here = replace(situation("sigmoid", "activation", [gelu_parallel]), tried=failed,
                   broke=failed)  # fmt: skip

    proposal = propose(here, book)

    assert proposal.candidate is not None
    assert proposal.candidate.strategy == "omp_parallel_for(loop=L0, schedule=static)"


def failed_replay_case(book: CaseBook, slug: str, replay: str) -> Hit:
    """A case of `slug` whose replayed path `replay` broke its naive kernel."""
    session = book.new_session()
    start = book.record(session_id=session, slug=slug, iteration=0, strategy="starting kernel",
                        outcome="no_change", latency_ms=10.0, source=naive(slug))  # fmt: skip
    child = book.record(session_id=session, slug=slug, iteration=1, strategy=replay,
                        outcome="incorrect", correct=False, parent_id=start)  # fmt: skip
    return hit(child, text=f"{slug}: {replay}")


def test_a_replay_that_broke_a_similar_map_speaks_against_its_one_flag_set(book: CaseBook) -> None:
    """swiglu in a suite run: after gelu's path broke sigmoid, swiglu's round on -ffast-math
    broke it the same way. The replay's case is a known failure of that flag set."""
    broke_sigmoid = failed_replay_case(book, "sigmoid", GELU_PATH)
    here = situation("swiglu", "activation", [broke_sigmoid])

    proposal = propose(here, book)

    assert proposal.candidate is not None
    assert proposal.candidate.strategy == "vector_math()"
    assert proposal.adopted == [{"key": broke_sigmoid.key, "why": (
        f"avoided flags(set=fast_math): {broke_sigmoid.key} (sigmoid, a kernel 100% alike) was "
        "incorrect after a replayed path whose one step that can change a result was "
        "flags(set=fast_math)")}]  # fmt: skip


def test_a_replay_that_broke_a_reduction_blames_no_one_step_elsewhere(book: CaseBook) -> None:
    broke_row_sum = failed_replay_case(book, "row_sum", GELU_PATH)
    here = situation("logsumexp_rows", "reduction", [broke_row_sum])

    proposal = propose(here, book)

    assert proposal.candidate is not None
    assert proposal.candidate.strategy == "flags(set=fast_math)"
