"""Named, parameterized source transformations of cpu-c kernels, for the offline search policy.

The policy improves a kernel by applying strategies such as "put `#pragma omp simd` on loop
L3" or "tile the nest at L0 by 32" to its C source, then lets the evaluator build, check and
time the result. This package is the strategy library: it says which strategies apply to a
source (`applicable`), applies one (`apply`), and describes the loops it reasons about
(`loops`).

Approach:

* The source is parsed with tree-sitter's C grammar; every structural question (which loops,
  what they read and write, whether a nest is perfect, which scalars accumulate) is answered
  from the syntax tree, never by matching C text with regular expressions.
* Loops are the `for` statements of `kope_kernel`, numbered "L0", "L1", ... in source order.
  Ids are positional: they are recomputed from each source, so after a transformation the
  same loop may carry another id. To compose, call `applicable` (or `loops`) again on the
  new source.
* A transformation is a list of edits by byte range, taken from the tree; everything outside
  the edited ranges stays byte-identical. The result is parsed again and rejected if it does
  not parse. Given the same strategy and source, the result is always the same.
* Preconditions are about form, not legality: a strategy applies when the code has the shape
  it needs (a perfect nest, a canonical loop, a recognisable accumulator). Whether the
  result still computes the right numbers (a parallel loop with a race, a vectorised prefix
  scan) is for the evaluator to find out. The data it needs to guess (reductions, `carried`)
  is in `LoopInfo`, best effort.
* gcc accepts one loop pragma per loop (`#pragma omp simd` and `#pragma GCC unroll` do not
  stack), so the pragma strategies only apply to loops that have no pragma yet.

Modules: `catalogue` (the strategies' names, parameters and types), `analysis` (the kernel's
loops from its syntax tree), `preconditions` and `editing` (what the strategies share), then
one module per family: `pragmas` (omp_parallel_for, omp_parallel_private, omp_simd, unroll),
`reordering` (interchange, tile, and what they would do to the order memory is walked in),
`accumulation` (accumulate_in_output, float_accumulator), `invariants` (hoist_invariant),
`declarations` (restrict_pointers, vector_math), `gemm` (packed_gemm and what every GEMM
lowering shares), `convolution` (im2col_gemm), `attention` (dots_by_gemm,
weighted_sums_by_gemm) and `buffers` (keep_buffers).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from apps.agents.offline.cparse import (
    Edit,
    TransformError,
    apply_edits,
    first_syntax_error,
    line_of,
    parse,
)
from apps.agents.offline.transforms.accumulation import _accumulate_in_output, _float_accumulator
from apps.agents.offline.transforms.analysis import _analyse, _Kernel, _Loop, _loop_calls
from apps.agents.offline.transforms.attention import _dots_by_gemm, _weighted_sums_by_gemm
from apps.agents.offline.transforms.buffers import _keep_buffers
from apps.agents.offline.transforms.catalogue import (
    _PARAMETERS,
    COLLAPSES,
    GEMM_K_SLABS,
    SCHEDULES,
    SOURCE_STRATEGIES,
    TILE_SIZES,
    UNROLL_FACTORS,
    LoopInfo,
    Strategy,
    strategy_from_label,
)
from apps.agents.offline.transforms.convolution import _im2col_gemm
from apps.agents.offline.transforms.declarations import DECLARE_SIMD as DECLARE_SIMD
from apps.agents.offline.transforms.declarations import _restrict_pointers, _vector_math
from apps.agents.offline.transforms.gemm import _not_a_fallback, _packed_gemm
from apps.agents.offline.transforms.invariants import _hoist_invariant
from apps.agents.offline.transforms.pragmas import (
    _omp_parallel_for,
    _omp_parallel_private,
    _omp_simd,
    _unroll,
)
from apps.agents.offline.transforms.reordering import _interchange, _tile
from apps.agents.offline.transforms.reordering import (
    interchange_reorders_tiles as interchange_reorders_tiles,
)
from apps.agents.offline.transforms.reordering import (
    interchange_stride_gain as interchange_stride_gain,
)
from apps.agents.offline.transforms.reordering import tile_finds_no_reuse as tile_finds_no_reuse
from apps.agents.offline.transforms.reordering import tile_splits_a_tile as tile_splits_a_tile
from apps.agents.offline.transforms.reordering import tile_walks_in_order as tile_walks_in_order

# The policy also imports DECLARE_SIMD and the reordering questions (interchange_stride_gain
# and the others) from here: their `X as X` imports re-export them.
__all__ = [
    "SOURCE_STRATEGIES",
    "LoopInfo",
    "Strategy",
    "TransformError",
    "applicable",
    "apply",
    "loops",
    "strategy_from_label",
]


def loops(source: str) -> list[LoopInfo]:
    """The `for` loops of `kope_kernel`, in source order; TransformError (with the line) when
    the source does not parse or defines no `kope_kernel`."""
    return [loop.info for loop in _analyse(source).loops]


def loop_calls(source: str) -> dict[str, frozenset[str]]:
    """The functions each `for` loop of `kope_kernel` calls, in its nested loops too, by id."""
    return _loop_calls(_analyse(source))


def applicable(source: str) -> list[Strategy]:
    """Every strategy that applies to `source`, with concrete parameters, in a fixed order
    (strategy, then loop, then parameter values). A strategy whose result equals the source
    or an earlier strategy's result is left out."""
    return list(_applicable(source))


# The policy asks again on every round, and a kernel with twenty loops takes a second to try
# every strategy on.
@functools.lru_cache(maxsize=64)
def _applicable(source: str) -> tuple[Strategy, ...]:
    kernel = _analyse(source)
    seen, found = {source}, []
    for strategy in _candidates(kernel):
        try:
            result = apply(strategy, source)
        except TransformError:
            continue
        if result not in seen:
            seen.add(result)
            found.append(strategy)
    return tuple(found)


def apply(strategy: Strategy, source: str) -> str:
    """`source` transformed by `strategy`; TransformError when it does not apply."""
    return _applied(strategy, source)


@functools.lru_cache(maxsize=1024)
def _applied(strategy: Strategy, source: str) -> str:
    transform = _TRANSFORMS.get(strategy.name)
    if transform is None:
        raise TransformError(f"unknown strategy {strategy.name!r}")
    unknown = [key for key, _ in strategy.params if key not in _PARAMETERS[strategy.name]]
    if unknown:
        raise TransformError(f"{strategy.name}: unknown parameter {unknown[0]!r}")
    kernel = _analyse(source)
    if strategy.param("loop") is not None:
        _not_a_fallback(strategy, kernel.loop(strategy))
    result = apply_edits(kernel.source, transform(kernel, strategy))
    broken = first_syntax_error(parse(result))
    if broken is not None:  # a bug here, not in the source: say so rather than hand it on
        raise TransformError(
            f"{strategy.label()}: internal error, the result does not parse (line "
            f"{line_of(broken)})"
        )
    return result.decode("utf-8")


# --- what may be tried --------------------------------------------------------------------


def _candidates(kernel: _Kernel) -> Iterator[Strategy]:
    for name in SOURCE_STRATEGIES:
        if not _PARAMETERS[name]:
            yield Strategy(name)
            continue
        for loop in kernel.loops:
            for extra in _parameter_menu(name, loop):
                yield Strategy(name, (("loop", loop.info.id), *extra))


def _parameter_menu(name: str, loop: _Loop) -> list[tuple[tuple[str, Any], ...]]:
    if name == "omp_parallel_for":
        collapses = COLLAPSES if loop.info.perfect_child else (None,)
        return [
            (("schedule", schedule),) + ((("collapse", collapse),) if collapse else ())
            for schedule in SCHEDULES
            for collapse in collapses
        ]
    if name == "unroll":
        return [(("factor", factor),) for factor in UNROLL_FACTORS]
    if name == "tile":
        return [(("size", size),) for size in TILE_SIZES]
    if name in ("packed_gemm", "im2col_gemm", "dots_by_gemm", "weighted_sums_by_gemm"):
        return [(("kc", kc),) for kc in GEMM_K_SLABS]
    return [()]


_TRANSFORMS: dict[str, Callable[[_Kernel, Strategy], list[Edit]]] = {
    "omp_parallel_for": _omp_parallel_for,
    "omp_parallel_private": _omp_parallel_private,
    "omp_simd": _omp_simd,
    "unroll": _unroll,
    "interchange": _interchange,
    "accumulate_in_output": _accumulate_in_output,
    "tile": _tile,
    "hoist_invariant": _hoist_invariant,
    "restrict_pointers": _restrict_pointers,
    "vector_math": _vector_math,
    "float_accumulator": _float_accumulator,
    "packed_gemm": _packed_gemm,
    "im2col_gemm": _im2col_gemm,
    "dots_by_gemm": _dots_by_gemm,
    "weighted_sums_by_gemm": _weighted_sums_by_gemm,
    "keep_buffers": _keep_buffers,
}
