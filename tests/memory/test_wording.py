"""A rule's wording from plain values: strategies in words, the expected effect, when not."""

from __future__ import annotations

import pytest

from apps.memory.wording import (
    Applicability,
    Failure,
    applies_words,
    claim_of,
    effect_words,
    not_when_words,
    statement_words,
    strategy_words,
)


@pytest.mark.parametrize(
    ("label", "words"),
    [
        ("omp_parallel_for(loop=L0, schedule=static)",
         "parallelize the outermost loop with OpenMP (static schedule)"),
        ("omp_parallel_for(collapse=2, loop=L2, schedule=dynamic)",
         "parallelize loop L2 (`for` number 3 in the kernel) with OpenMP (dynamic schedule, "
         "collapsing the two-loop nest)"),
        ("tile(loop=L0, size=32)",
         "tile the two-loop nest at the outermost loop into blocks of 32"),
        ("flags(set=fast_math)", "compile with -ffast-math (changes floating-point results)"),
        ("threads(n=16)", "run on 16 threads"),
        ("replay(case=12): unroll(factor=4, loop=L0); flags(set=unroll_loops)",
         "apply in order: unroll the outermost loop by 4; then compile with -funroll-loops"),
        ("swizzle_the_warps(lanes=4)", "swizzle_the_warps"),  # unknown: its label's name
        ("Use  a lookup table\nfor exp", "Use a lookup table"),  # free text: its first line
    ],
)  # fmt: skip
def test_a_strategy_label_reads_as_what_to_do(label: str, words: str) -> None:
    assert strategy_words(label) == words


def test_the_statement_gives_the_median_and_range_over_the_improving_adoptions() -> None:
    statement = statement_words("omp_parallel_for(loop=L0, schedule=static)", [2.6, 1.4, 1.9, 1.8])
    assert statement == (
        "Parallelize the outermost loop with OpenMP (static schedule). Expected speedup vs "
        "parent: median 1.85x (1.40x-2.60x) over 4 adoptions."
    )
    assert effect_words([]) == "no improving adoption measured"


def test_when_and_when_not_name_the_conditions_and_the_failures_by_operator() -> None:
    where = Applicability("matmul", "large", "float32", "cpu-c", profile="L1 misses 40%")
    applies = applies_words(where, ["gemm", "batched_matmul"])
    assert applies == ("matmul operators (large float32) on cpu-c, where the profile showed: "
                       "L1 misses 40%; improved gemm, batched_matmul")  # fmt: skip
    failures = [Failure(31, "gelu", "incorrect"), Failure(40, "avg_pool2d", "regressed", 0.7)]
    assert not_when_words(failures) == (
        "it broke correctness on gelu: incorrect (case 31); slowed avg_pool2d down (0.70x) "
        "(case 40)"
    )
    assert not_when_words([]) == "no failure of this strategy is on record yet"


def test_a_claim_ignores_loop_ids_but_keeps_every_other_parameter_and_the_family() -> None:
    def claim(label: str, family: str = "matmul") -> str:
        return claim_of(label, family=family, target="cpu-c")

    assert claim("tile(loop=L1, size=32)") == claim("tile(size=32, loop=L3)")
    assert claim("tile(loop=L1, size=32)") != claim("tile(loop=L1, size=64)")
    assert claim("tile(loop=L1, size=32)") != claim("tile(loop=L1, size=32)", "conv")
    assert claim("replay(case=3): unroll(factor=4, loop=L0)") == claim("unroll(factor=4, loop=L2)")
