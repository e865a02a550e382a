"""What kind of kernel this is, in a few words the offline policy can compare.

A lesson transfers between kernels that pose the same problem to the compiler: -ffast-math
pays where there are math-library calls or float reductions to vectorize, an i-p-j loop order
where there is a three-deep nest with an accumulation. The features are read from the syntax
tree: the depth of the deepest loop nest, whether a loop accumulates (a reduction), whether
the kernel calls the math library, whether a loop carries a value it cannot reduce (a scan),
and whether it allocates whole tensors as temporaries (a lowered chain of ops). Two kernels'
features are compared by their Jaccard overlap.
"""

from __future__ import annotations

import functools

from apps.agents.offline.cparse import DOUBLE_FUNCTIONS, FLOAT_FUNCTIONS, called_functions, parse
from apps.agents.offline.transforms import LoopInfo, TransformError, loop_calls, loops

LOWERED_ALLOCATOR = "kope_alloc"  # apps/operators/lowering: a whole tensor's temporary
TEMPORARIES = "temporaries"
MATH_CALLS = (FLOAT_FUNCTIONS | DOUBLE_FUNCTIONS) - {"fabsf", "fabs", "fmaxf", "fminf", "fmax",
                                                      "fmin"}  # fmt: skip


@functools.lru_cache(maxsize=1024)
def kernel_features(source: str) -> frozenset[str]:
    """e.g. {"deep-nest", "reduction"} for a naive GEMM; empty when the source does not parse."""
    try:
        found = loops(source)
    except TransformError:
        return frozenset()
    features = {nest_feature(1 + max((loop.depth for loop in found), default=-1))}
    if any(loop.reductions for loop in found):
        features.add("reduction")
    if any(loop.carried for loop in found):
        features.add("carried")
    if calls_math(source):
        features.add("math-calls")
    if LOWERED_ALLOCATOR in called_functions(parse(source.encode()).root_node):
        features.add(TEMPORARIES)
    return frozenset(features)


LoopRole = tuple[bool, bool, tuple[str, ...], bool, bool]


def loop_roles(source: str) -> dict[str, LoopRole]:
    """What each loop does, by id, in terms that carry from one kernel to another: whether it is
    outermost, whether it is innermost and, if so, what it reduces, whether it carries a value
    and whether it calls the math library. Loop ids are positions: L2 of scaled_softmax sums
    exponentials, L2 of layernorm sums squares; a float accumulator that made the first 4x
    faster made the second 4.5x slower. Empty when the source does not parse."""
    return dict(_loop_roles(source))


@functools.lru_cache(maxsize=1024)
def _loop_roles(source: str) -> tuple[tuple[str, LoopRole], ...]:
    try:
        found, calls = loops(source), loop_calls(source)
    except TransformError:
        return ()
    return tuple((loop.id, role_of(loop, calls[loop.id])) for loop in found)


def role_of(loop: LoopInfo, calls: frozenset[str]) -> LoopRole:
    """An innermost loop by what it computes; a loop around others by where it sits (what its
    inner loops compute differs from kernel to kernel, and a parallel or tiled outer loop
    does not care)."""
    if loop.children:
        return (loop.parent is None, False, (), False, False)
    reductions = tuple(sorted({op for _, op in loop.reductions}))
    return (loop.parent is None, True, reductions, loop.carried, bool(calls & MATH_CALLS))


def same_role_loop(loop: str, there: str, here: str) -> str | None:
    """The loop of `here` that plays the role `loop` plays in `there`: the k-th loop of that
    role in source order there is the k-th one here. None when `here` has no such loop, or
    when either source does not parse."""
    roles_there, roles_here = loop_roles(there), loop_roles(here)
    role = roles_there.get(loop)
    if role is None:
        return None
    alike_there = [key for key, value in roles_there.items() if value == role]
    alike_here = [key for key, value in roles_here.items() if value == role]
    rank = alike_there.index(loop)
    return alike_here[rank] if rank < len(alike_here) else None


def nest_feature(depth: int) -> str:
    """A batched matmul (4 deep) poses the same problem as a matmul (3 deep)."""
    return {0: "no-loop", 1: "flat", 2: "nest-2"}.get(depth, "deep-nest")


def calls_math(source: str) -> bool:
    return any(name in MATH_CALLS for name in called_functions(parse(source.encode()).root_node))


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard overlap of two feature sets (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)
