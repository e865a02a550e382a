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

from apps.accounts.models import Team
from apps.agents.offline.policy import NO_MATH_ERRNO, OfflineSearchPolicy, moves
from apps.agents.offline.transforms import DECLARE_SIMD, Strategy, TransformError, apply
from apps.agents.policy import Attempt, Candidate
from apps.devices.cpu_c.build import compile_kernel
from apps.devices.evaluator import EvalSettings, evaluate_candidate
from apps.devices.services import operator_under_test
from apps.devices.symbols import imported_symbols
from tests.agents.test_offline_policy import naive, situation
from tests.factories import stored_builtin

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


def sigmoid_move(incumbent: Candidate, team: Team) -> Candidate | None:
    attempt = Attempt(1, incumbent, "no_change", True, 50.0, "")
    offered = moves(replace(situation(team, "sigmoid", "activation", []), incumbent=attempt))
    return next((c for c in offered if c.strategy == "vector_math()"), None)


def test_the_move_brings_no_math_errno_and_skips_kernels_built_with_fast_math(team: Team) -> None:
    plain = sigmoid_move(Candidate(naive("sigmoid"), "starting kernel"), team)
    fast = sigmoid_move(Candidate(naive("sigmoid"), "flags", ("-ffast-math",)), team)

    assert plain is not None and plain.flags == (NO_MATH_ERRNO,)
    assert fast is None  # math.h declares the vector versions then: the same binary


def test_where_fast_math_broke_the_kernel_vector_math_comes_next(team: Team) -> None:
    broken = frozenset({"flags(set=fast_math)"})
    here = replace(situation(team, "sigmoid", "activation", []), tried=broken, broke=broken)

    proposal = OfflineSearchPolicy().propose(here, tools=None)  # type: ignore[arg-type]

    assert proposal.candidate is not None
    assert proposal.candidate.strategy == "vector_math()"
    assert proposal.candidate.flags == (NO_MATH_ERRNO,)


def test_after_a_replay_with_fast_math_broke_the_kernel_its_steps_do_not_come_alone_first(
    team: Team,
) -> None:
    """sigmoid in a suite run: gelu's path (-ffast-math and the parallel loop), replayed on the
    start, broke it. The next round tried -ffast-math alone, which broke it the same way, and
    the parallel loop no longer fit in the five rounds (0.72x against memory off)."""
    replayed = ("replay(case=160): flags(set=fast_math); "
                "omp_parallel_for(loop=L0, schedule=static)")  # fmt: skip
    failed = frozenset({replayed})
    here = replace(situation(team, "sigmoid", "activation", []), tried=failed, broke=failed)

    proposal = OfflineSearchPolicy().propose(here, tools=None)  # type: ignore[arg-type]

    assert proposal.candidate is not None
    assert proposal.candidate.strategy == "vector_math()"
