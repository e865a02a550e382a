"""What kind of kernel this is, in a few words the offline policy can compare.

A lesson transfers between kernels that pose the same problem to the compiler: -ffast-math
pays where there are math-library calls or float reductions to vectorize, an i-p-j loop order
where there is a three-deep nest with an accumulation. The features are read from the syntax
tree: the depth of the deepest loop nest, whether a loop accumulates (a reduction), whether
the kernel calls the math library, and whether a loop carries a value it cannot reduce (a
scan). Two kernels' features are compared by their Jaccard overlap.
"""

from __future__ import annotations

import functools

from apps.agents.offline.cparse import DOUBLE_FUNCTIONS, FLOAT_FUNCTIONS, parse, text, walk
from apps.agents.offline.transforms import TransformError, loops

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
    return frozenset(features)


def nest_feature(depth: int) -> str:
    """A batched matmul (4 deep) poses the same problem as a matmul (3 deep)."""
    return {0: "no-loop", 1: "flat", 2: "nest-2"}.get(depth, "deep-nest")


def calls_math(source: str) -> bool:
    tree = parse(source.encode())
    for node in walk(tree.root_node):
        if node.type == "call_expression":
            function = node.child_by_field_name("function")
            if function is not None and text(function) in MATH_CALLS:
                return True
    return False


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard overlap of two feature sets (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)
