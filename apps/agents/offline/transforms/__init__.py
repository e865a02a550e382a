"""Named, parameterized source transformations of cpu-c kernels, for the offline search policy.

The policy improves a kernel by applying strategies such as "put `#pragma omp simd` on loop
L3" or "tile the nest at L0 by 32" to its C source, then lets the evaluator build, check and
time the result. This module is the strategy library: it says which strategies apply to a
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
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

from tree_sitter import Node, Tree

from apps.agents.offline.cparse import (
    CType,
    Edit,
    TransformError,
    apply_edits,
    called_functions,
    contains,
    declarator_name,
    declarators,
    declared_names,
    declared_types,
    defined_functions,
    escapes,
    expression_type,
    field,
    first_syntax_error,
    identifiers,
    indentation,
    insertion,
    is_pragma,
    is_scalar_declarator,
    kernel_function,
    line_of,
    line_start,
    operator,
    parameter_names,
    parse,
    pragma_text,
    reindented,
    replacement,
    require_parsable,
    same,
    squashed,
    statements,
    strip_parens,
    strip_parens_and_casts,
    text,
    visible_declaration,
    walk,
    written_names,
    written_target,
)
from apps.agents.offline.packed_gemm import (
    FIRST_FREE_SCRATCH_SLOT,
    HELPER_NAME,
    HELPER_SOURCE,
    MASKED_HELPER_NAME,
    SCRATCH_NAME,
)

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

KERNEL_NAME = "kope_kernel"
VARIANT_NAME = re.compile(r"kope_variant_\d+")  # apps/operators/lowering/emit.py names them

SOURCE_STRATEGIES: dict[str, str] = {
    "omp_parallel_for": (
        "Run a loop's iterations on all cores: `#pragma omp parallel for schedule(...)`, with "
        "reduction clauses for its accumulators and optionally collapse(2) over a perfect nest."
    ),
    "omp_parallel_private": (
        "Run a loop's iterations on all cores when it uses scratch buffers (`T *b = "
        "malloc(...)` before it): a parallel region allocates them once per thread, then "
        "`#pragma omp for schedule(static)` shares out the iterations (a thread without "
        "memory makes the kernel return 1)."
    ),
    "omp_simd": (
        "Ask gcc to vectorise an innermost loop: `#pragma omp simd`, with reduction clauses for "
        "its accumulators (this reorders floating-point sums)."
    ),
    "unroll": "Unroll an innermost loop by 2, 4 or 8: `#pragma GCC unroll N`.",
    "interchange": "Swap a loop with its perfectly nested child loop (exchange their headers).",
    "accumulate_in_output": (
        "Turn `for j { acc = 0; for p acc += ...; out[..j..] = acc; }` into zeroing the outputs "
        "and `for p { for j out[..j..] += ...; }` (i-p-j matmul order, vectorisable; the sum is "
        "kept in the output's type)."
    ),
    "tile": "Tile a perfect two-loop nest into blocks of 16, 32 or 64 (four loops).",
    "hoist_invariant": (
        "Compute loop-invariant index products once before a loop, and replace divisions by a "
        "loop-invariant value with multiplication by its reciprocal (this changes rounding)."
    ),
    "restrict_pointers": "Declare the input and output data pointers `restrict` (no aliasing).",
    "vector_math": (
        "Let gcc call glibc's vector math library (libmvec) in loops: the math functions the "
        "loops call (expf, logf, erff, tanhf, powf, sinf, cosf and their double versions) "
        "declared `#pragma omp declare simd notinbranch`, built with -fno-math-errno. Unlike "
        "-ffast-math it keeps infinities and NaN, and the sums' order."
    ),
    "float_accumulator": (
        "Make a loop's double accumulators float (faster, vectorises better, less precise)."
    ),
    "packed_gemm": (
        "Replace a matrix-product nest `for i { for j { acc = 0; for p acc += A[i,p] * "
        "B[p,j]; ...acc... } }` (float operands, any strides) by a call to a packed, "
        "register-tiled, multi-threaded GEMM (k in slabs of kc: 128, 256 or 512); what the "
        "nest did with each sum (bias, activation, a store) stays a loop over the results."
    ),
    "im2col_gemm": (
        "Lower a windowed reduction (a convolution: `for o { for i { acc = init; for ch { "
        "guards; for p { acc += X[..i..p..] * W[..o..p..]; } } ... } }`) to one GEMM: the "
        "window's values copied into a patch row per output column (zero where a guard "
        "skips), W packed one row per o, the packed GEMM of the two (kc: 128, 256 or 512), "
        "then what the nest did with each sum, over the results."
    ),
    "dots_by_gemm": (
        "Compute a row loop's dot products first, as one GEMM: `for i { ...; for j { acc = 0; "
        "for p acc += A[i,p] * B[p,j]; ...acc... } ... }` (attention's scores; j up to a "
        "fixed bound, or to i inclusive) becomes the packed GEMM of all rows i and columns j "
        "into a buffer (kc: 128, 256 or 512), then the row loop reading each sum from it."
    ),
    "keep_buffers": (
        "Keep the kernel's temporary buffers from one call to the next: each `p = malloc(n)` "
        "(or kope_alloc) whose pointer the kernel frees gets a buffer per allocation site, "
        "grown when a call needs more and never freed, so a large temporary is not fresh "
        "pages, faulted in, on every call."
    ),
    "weighted_sums_by_gemm": (
        "Compute a row loop's weighted sums of a matrix's rows as one GEMM: `for i { ...; for "
        "e acc[e] = 0; for j { for e acc[e] += w[j] * V[j,e]; } ...acc[e]... }` (attention's "
        "probabilities times values; j up to a fixed bound, or to i inclusive) becomes the "
        "row loop up to the sums with each row's weights kept, the packed GEMM of all rows' "
        "weights and V (kc: 128, 256 or 512), then the rest of the row loop reading the sums."
    ),
}

SCHEDULES = ("static", "dynamic")
COLLAPSES = (1, 2)
UNROLL_FACTORS = (2, 4, 8)
TILE_SIZES = (16, 32, 64)
GEMM_K_SLABS = (128, 256, 512)

_PARAMETERS: dict[str, tuple[str, ...]] = {
    "omp_parallel_for": ("collapse", "loop", "schedule"),
    "omp_parallel_private": ("loop",),
    "omp_simd": ("loop",),
    "unroll": ("factor", "loop"),
    "interchange": ("loop",),
    "accumulate_in_output": ("loop",),
    "tile": ("loop", "size"),
    "hoist_invariant": ("loop",),
    "restrict_pointers": (),
    "vector_math": (),
    "float_accumulator": ("loop",),
    "packed_gemm": ("kc", "loop"),
    "im2col_gemm": ("kc", "loop"),
    "dots_by_gemm": ("kc", "loop"),
    "weighted_sums_by_gemm": ("kc", "loop"),
    "keep_buffers": (),
}

# OpenMP's reduction operator for each recognised accumulation (a `-=` sum combines with +).
_OMP_REDUCTION = {"+": "+", "-": "+", "*": "*", "max": "max", "min": "min"}
_ATOMIC_EXPRESSIONS = frozenset({
    "identifier", "number_literal", "parenthesized_expression", "field_expression",
    "subscript_expression", "call_expression", "cast_expression",
})  # fmt: skip


# --- the public types -----------------------------------------------------------------------


@dataclass(frozen=True)
class LoopInfo:
    """One `for` statement of `kope_kernel`, as the strategies see it."""

    id: str  # "L0", "L1", ... in source order of the `for` statements: positional
    line: int  # 1-based line of the `for`
    var: str | None  # the induction variable of `for (T v = a; v < b; ++v / v++ / v += c)`,
    # c a positive integer literal (OpenMP's canonical form, which tiled block loops have)
    depth: int  # 0 = outermost for in the function
    parent: str | None  # the enclosing for's id
    children: list[str]  # directly nested for ids
    perfect_child: str | None  # the inner for when the body is exactly that one loop
    reductions: list[tuple[str, str]]  # (variable, "+" | "-" | "*" | "max" | "min")
    carried: bool  # best effort: reads a scalar it writes (not as a reduction), or writes an
    # array element at an index not derived from the loop variable
    has_pragma: bool  # already preceded by a `#pragma omp` line


@dataclass(frozen=True)
class Strategy:
    """A named transformation with concrete parameters, e.g. `tile(loop=L0, size=32)`.
    Parameters are kept sorted by key, so equal strategies compare and hash equal."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(sorted(self.params, key=lambda kv: kv[0])))

    @classmethod
    def make(cls, name: str, **params: Any) -> Strategy:
        return cls(name, tuple(params.items()))

    def label(self) -> str:
        return f"{self.name}({', '.join(f'{key}={value}' for key, value in self.params)})"

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)


def strategy_from_label(label: str) -> Strategy:
    """The strategy `label` names: the inverse of `Strategy.label()`."""
    name, opening, rest = label.strip().partition("(")
    if not opening or not rest.endswith(")") or name not in SOURCE_STRATEGIES:
        raise TransformError(f"not a strategy label: {label!r}")
    params: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest[:-1].split(","))):
        key, equals, value = (piece.strip() for piece in item.partition("="))
        if not equals or key not in _PARAMETERS[name] or key in params:
            raise TransformError(f"not a strategy label: {label!r} (parameter {item!r})")
        if not (value.isascii() and value.replace("_", "").isalnum()):
            raise TransformError(f"not a strategy label: {label!r} (value {value!r})")
        params[key] = int(value) if value.isdigit() else value
    return Strategy(name, tuple(params.items()))


def loops(source: str) -> list[LoopInfo]:
    """The `for` loops of `kope_kernel`, in source order; TransformError (with the line) when
    the source does not parse or defines no `kope_kernel`."""
    return [loop.info for loop in _analyse(source).loops]


def loop_calls(source: str) -> dict[str, frozenset[str]]:
    """The functions each `for` loop of `kope_kernel` calls, in its nested loops too, by id."""
    return _loop_calls(_analyse(source))


def _loop_calls(kernel: _Kernel) -> dict[str, frozenset[str]]:
    return {loop.info.id: frozenset(called_functions(loop.node)) for loop in kernel.loops}


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


def interchange_stride_gain(source: str, loop_id: str) -> int | None:
    """How many more array subscripts in the body of `loop_id`'s perfect child step one element
    with the loop that runs inside after interchanging the two than before. A naive GEMM's
    i-j-p order reads B down a column in p; i-p-j reads B and C along rows: +1. Attention's
    `for j for e: acc[e] += p[j] * v[j*d + e]` turned to run j inside walks p alone where it
    walked acc and v: -1; a GEMM's i and j swapped write C down its columns: -2. None when
    `loop_id` has no perfect child, or the source does not parse. A compiler's cost model,
    not a verdict: the evaluator still decides."""
    nest = _perfect_pair(source, loop_id)
    if nest is None:
        return None
    return sum(_steps_one(index, nest.outer_var) - _steps_one(index, nest.inner_var)
               for index in _subscripts(nest.inner))  # fmt: skip


def interchange_reorders_tiles(source: str, loop_id: str) -> bool:
    """Whether interchanging `loop_id` with its perfect child would only change the order in
    which whole tiles are visited: no subscript in the child's body reads either variable,
    and both bound the loops inside (a tile's block loops, `ii` and `jj` around `i` and `j`).
    Every array is walked as before, element by element; on transpose_2d's tiles the swap
    ran 0.67x and 0.86x."""
    nest = _perfect_pair(source, loop_id)
    if nest is None:
        return False
    pair = {nest.outer_var, nest.inner_var}
    read = {name for index in _subscripts(nest.inner) for name in identifiers(index)}
    bounding = {name for inside in _analyse(source).descendants(nest.inner)
                for part in _header_parts(inside.node) for name in identifiers(part)}  # fmt: skip
    return not (pair & read) and pair <= bounding


def tile_walks_in_order(source: str, loop_id: str) -> bool:
    """Whether tiling `loop_id` with its perfect, innermost child would cut up a nest that
    already walks memory in order: every subscript in the child's body steps one element with
    the child's variable or does not move with it. Tiles pay where an array is read across
    the inner loop (a transpose writes down a column); here they only shorten the inner loop
    (attention's sum over values, tiled, ran 1.2x slower)."""
    nest = _perfect_pair(source, loop_id)
    if nest is None or nest.inner.info.children:
        return False
    indices, var = _subscripts(nest.inner), nest.inner_var
    return bool(indices) and all(_steps_one(index, var) or var not in identifiers(index)
                                 for index in indices)  # fmt: skip


def tile_finds_no_reuse(source: str, loop_id: str) -> bool:
    """Whether tiling `loop_id` with its perfect child has nothing to keep in cache from one
    step of a tile to the next: every subscript in the child's body moves with both loops, and
    none steps one element with the outer loop while striding with the inner one. A tile pays
    on an array read again across one of the two loops (a GEMM's `a[i*k + p]` across j) or
    read along the outer loop while the inner one walks down it (a transpose). avg_pool2d's
    output rows, tiled, ran 2x slower: each window is read once."""
    nest = _perfect_pair(source, loop_id)
    if nest is None:
        return False
    indices = _subscripts(nest.inner)
    return bool(indices) and not any(_reused_in_a_tile(index, nest) for index in indices)


def tile_splits_a_tile(source: str, loop_id: str) -> bool:
    """Whether `loop_id` is a tile's element loop already: its bound reads the variable of an
    enclosing loop that steps by more than one (`i < (ii + 32 < rows ? ii + 32 : rows)`).
    Tiled again, a loop of at most one tile's length only gains a loop around it: on
    transpose_2d's 32-element tiles that ran 0.89x."""
    try:
        kernel = _analyse(source)
    except TransformError:
        return False
    loop = kernel.by_id(loop_id)
    if loop is None or loop.header is None:
        return False
    block_vars = {outer.header.var for outer in kernel.ancestors(loop)
                  if outer.header is not None and outer.header.step > 1}  # fmt: skip
    return bool(block_vars & set(identifiers(loop.header.bound)))


def _reused_in_a_tile(index: Node, nest: _Pair) -> bool:
    names = identifiers(index)
    if nest.outer_var not in names or nest.inner_var not in names:
        return True  # the same element again on every step of a loop it does not move with
    return _steps_one(index, nest.outer_var) and not _steps_one(index, nest.inner_var)


@dataclass(frozen=True)
class _Pair:
    outer: _Loop
    outer_var: str
    inner: _Loop
    inner_var: str


def _perfect_pair(source: str, loop_id: str) -> _Pair | None:
    """`loop_id` and its perfect child, when both are canonical."""
    try:
        kernel = _analyse(source)
    except TransformError:
        return None
    outer = kernel.by_id(loop_id)
    inner = kernel.by_id(outer.info.perfect_child) if outer is not None else None
    if outer is None or inner is None or outer.header is None or inner.header is None:
        return None
    return _Pair(outer, outer.header.var, inner, inner.header.var)


def _subscripts(loop: _Loop) -> list[Node]:
    """The index expressions of every `a[index]` in the loop's body."""
    body = field(loop.node, "body")
    if body is None:
        return []
    found = (field(node, "index") for node in walk(body) if node.type == "subscript_expression")
    return [index for index in found if index is not None]


def _steps_one(index: Node, var: str) -> bool:
    """Whether `index` is `var` plus terms without it: `a[i*n + j]` steps one element with j,
    `x[(i*s + p) * w + q]` with q, not with p (a row at a time)."""
    terms = list(_added_terms(index))
    moving = [(term, sign) for term, sign in terms if var in identifiers(term)]
    return len(moving) == 1 and moving[0][1] > 0 and text(moving[0][0]) == var


def _added_terms(node: Node, sign: int = 1) -> Iterator[tuple[Node, int]]:
    """The terms of a sum, through parentheses, each with its sign."""
    node = strip_parens(node)
    left, right = field(node, "left"), field(node, "right")
    if node.type == "binary_expression" and operator(node) in ("+", "-") and left and right:
        yield from _added_terms(left, sign)
        yield from _added_terms(right, sign if operator(node) == "+" else -sign)
    else:
        yield node, sign


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


# --- analysis -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Header:
    """`for (T var = start; var < bound; ++var)`: the parts of a canonical loop header."""

    var: str
    declared_type: str | None  # T, when the header declares the variable
    start: Node
    comparison: str  # "<" or "<="
    bound: Node
    update: Node
    step: int


@dataclass(frozen=True)
class _Loop:
    info: LoopInfo
    node: Node
    header: _Header | None
    pragmas: tuple[Node, ...]  # the pragma lines directly before it, in source order
    reduction_statements: dict[str, list[Node]]  # per reduction variable


@dataclass(frozen=True)
class _Kernel:
    source: bytes
    tree: Tree
    function: Node  # the first of `functions`: what goes before the kernel goes before it
    functions: tuple[Node, ...]  # kope_kernel and the variants it calls, in source order
    loops: tuple[_Loop, ...]
    types: dict[str, CType | None]

    def loop(self, strategy: Strategy) -> _Loop:
        loop_id = strategy.param("loop")
        if loop_id is None:
            raise TransformError(f"{strategy.name}: needs a loop parameter")
        for loop in self.loops:
            if loop.info.id == loop_id:
                return loop
        known = ", ".join(loop.info.id for loop in self.loops) or "none"
        raise TransformError(f"{strategy.name}: no loop {loop_id} in this source (loops: {known})")

    def by_id(self, loop_id: str | None) -> _Loop | None:
        return next((loop for loop in self.loops if loop.info.id == loop_id), None)

    def at(self, node: Node) -> _Loop:
        """The loop whose `for` statement is `node`."""
        return next(loop for loop in self.loops if same(loop.node, node))

    def ancestors(self, loop: _Loop) -> Iterator[_Loop]:
        current = self.by_id(loop.info.parent)
        while current is not None:
            yield current
            current = self.by_id(current.info.parent)

    def descendants(self, loop: _Loop) -> list[_Loop]:
        return [
            other
            for other in self.loops
            if contains(loop.node, other.node) and not same(loop.node, other.node)
        ]


@functools.lru_cache(maxsize=64)
def _analyse(source: str) -> _Kernel:
    data = source.encode("utf-8")
    tree = require_parsable(data, "cannot parse the kernel")
    function = kernel_function(tree, KERNEL_NAME)
    if function is None or field(function, "body") is None:
        raise TransformError(f"no definition of {KERNEL_NAME}() in this source")
    functions = _kernel_functions(tree)
    bodies = [body for f in functions if (body := field(f, "body")) is not None]
    nodes = [node for body in bodies for node in walk(body) if node.type == "for_statement"]
    ids = {node.id: f"L{index}" for index, node in enumerate(nodes)}
    parents = {node.id: _enclosing_loop(node, next(b for b in bodies if contains(b, node)))
               for node in nodes}  # fmt: skip
    found = []
    for node in nodes:
        parent = parents[node.id]
        header = _parse_header(node)
        pragmas = _pragmas_before(node)
        reductions, reduction_statements = _reductions(node)
        perfect = _perfect_child(node)
        info = LoopInfo(
            id=ids[node.id],
            line=line_of(node),
            var=header.var if header else None,
            depth=_depth(node, parents),
            parent=ids[parent.id] if parent is not None else None,
            children=[ids[n.id] for n in nodes if same(parents[n.id], node)],
            perfect_child=ids[perfect.id] if perfect is not None else None,
            reductions=reductions,
            carried=_carried(node, header, reduction_statements),
            has_pragma=any(pragma_text(p).split()[:1] == ["omp"] for p in pragmas),
        )
        found.append(_Loop(info, node, header, pragmas, reduction_statements))
    return _Kernel(data, tree, functions[0], functions, tuple(found), _types(functions))


def _kernel_functions(tree: Tree) -> tuple[Node, ...]:
    """kope_kernel and, where the lowering wrote one function per kind of call
    (kope_variant_0, kope_variant_1, ... that kope_kernel dispatches to), those: their loops
    are the kernel's, numbered in source order. Other helpers are no part of it."""
    return tuple(node for node, name in defined_functions(tree)
                 if name == KERNEL_NAME or VARIANT_NAME.fullmatch(name))  # fmt: skip


def _types(functions: tuple[Node, ...]) -> dict[str, CType | None]:
    """The names the functions declare, with their types; None where two disagree."""
    table: dict[str, CType | None] = {}
    for function in functions:
        for name, ctype in declared_types(function).items():
            table[name] = ctype if table.get(name, ctype) == ctype else None
    return table


def _enclosing_loop(node: Node, body: Node) -> Node | None:
    parent = node.parent
    while parent is not None and not same(parent, body):
        if parent.type == "for_statement":
            return parent
        parent = parent.parent
    return None


def _depth(node: Node, parents: dict[int, Node | None]) -> int:
    depth, parent = 0, parents[node.id]
    while parent is not None:
        depth, parent = depth + 1, parents[parent.id]
    return depth


def _parse_header(node: Node) -> _Header | None:
    initializer, condition = field(node, "initializer"), field(node, "condition")
    update, body = field(node, "update"), field(node, "body")
    if initializer is None or condition is None or update is None or body is None:
        return None
    initial = _initial_assignment(initializer)
    condition = strip_parens(condition)
    if initial is None or condition.type != "binary_expression":
        return None
    var, declared_type, start = initial
    left, bound = field(condition, "left"), field(condition, "right")
    if left is None or bound is None or operator(condition) not in ("<", "<="):
        return None
    if strip_parens(left).type != "identifier" or text(strip_parens(left)) != var:
        return None
    step = _constant_step(update, var)
    if step is None or var in written_names(body):
        return None
    return _Header(var, declared_type, start, operator(condition), bound, update, step)


def _initial_assignment(initializer: Node) -> tuple[str, str | None, Node] | None:
    """`T v = a` or `v = a` as (v, T or None, a)."""
    if initializer.type == "declaration":
        found = declarators(initializer)
        type_node = field(initializer, "type")
        if len(found) != 1 or found[0].type != "init_declarator" or type_node is None:
            return None
        name, value = field(found[0], "declarator"), field(found[0], "value")
        if name is None or value is None or name.type != "identifier":
            return None
        return text(name), text(type_node), value
    if initializer.type == "assignment_expression" and operator(initializer) == "=":
        name, value = field(initializer, "left"), field(initializer, "right")
        if name is not None and value is not None and name.type == "identifier":
            return text(name), None, value
    return None


def _constant_step(update: Node, var: str) -> int | None:
    """c for `++var`, `var++` (1) and `var += c` (c a positive integer literal)."""
    if update.type == "update_expression":
        argument = field(update, "argument")
        increments = operator(update) == "++" and argument is not None
        return 1 if increments and argument is not None and text(argument) == var else None
    if update.type == "assignment_expression" and operator(update) == "+=":
        left, right = field(update, "left"), field(update, "right")
        if left is not None and right is not None and text(left) == var:
            return int(text(right)) if text(right).isdigit() and int(text(right)) > 0 else None
    return None


def _pragmas_before(node: Node) -> tuple[Node, ...]:
    found = []
    sibling = node.prev_sibling
    while sibling is not None and (sibling.type == "comment" or is_pragma(sibling)):
        if is_pragma(sibling):
            found.append(sibling)
        sibling = sibling.prev_sibling
    return tuple(reversed(found))


def _perfect_child(node: Node) -> Node | None:
    body = field(node, "body")
    inner = statements(body) if body is not None else []
    return inner[0] if len(inner) == 1 and inner[0].type == "for_statement" else None


def _reductions(loop: Node) -> tuple[list[tuple[str, str]], dict[str, list[Node]]]:
    """Scalars declared outside the loop that every write inside it accumulates the same way."""
    body = field(loop, "body")
    if body is None:
        return [], {}
    declared_inside = declared_names(loop)
    uses: dict[str, list[tuple[str, Node]]] = {}
    for node in walk(body):
        found = _reduction_at(node)
        if found is not None and found[0] not in declared_inside:
            uses.setdefault(found[0], []).append((found[1], node))
    reductions, reduction_statements = [], {}
    for var, var_uses in uses.items():
        nodes = [node for _, node in var_uses]
        if len({_OMP_REDUCTION[op] for op, _ in var_uses}) != 1:
            continue
        if not _only_written_by(body, var, nodes) or not _is_scalar_at(var, loop):
            continue
        reductions.append((var, var_uses[0][0]))
        reduction_statements[var] = nodes
    return reductions, reduction_statements


def _reduction_at(node: Node) -> tuple[str, str] | None:
    """(variable, operator) when `node` is one accumulation step: `s += e`, `s = s * e`,
    `s = fmaxf(s, e)`, `s = e > s ? e : s`, `if (e > s) s = e;` and their variants."""
    if node.type == "if_statement":
        return _if_reduction(node)
    if node.type != "assignment_expression":
        return None
    left, right = field(node, "left"), field(node, "right")
    if left is None or right is None or left.type != "identifier":
        return None
    var, op = text(left), operator(node)
    if op in ("+=", "-=", "*="):
        return (var, op[0]) if var not in identifiers(right) else None
    if op != "=":
        return None
    value = strip_parens(right)
    if value.type == "binary_expression":
        return _binary_reduction(var, value)
    if value.type == "call_expression":
        return _call_reduction(var, value)
    if value.type == "conditional_expression":
        condition, chosen = field(value, "condition"), field(value, "consequence")
        other = field(value, "alternative")
        if condition is not None and chosen is not None and other is not None:
            return _selection_reduction(var, condition, chosen, other)
    return None


def _binary_reduction(var: str, value: Node) -> tuple[str, str] | None:
    op, left, right = operator(value), field(value, "left"), field(value, "right")
    if op not in ("+", "-", "*") or left is None or right is None:
        return None
    left, right = strip_parens(left), strip_parens(right)
    if text(left) == var and left.type == "identifier" and var not in identifiers(right):
        return var, op
    commutes = op in ("+", "*")
    if commutes and text(right) == var and right.type == "identifier":
        return (var, op) if var not in identifiers(left) else None
    return None


def _call_reduction(var: str, value: Node) -> tuple[str, str] | None:
    function, arguments = field(value, "function"), field(value, "arguments")
    kinds = {"fmaxf": "max", "fmax": "max", "fminf": "min", "fmin": "min"}
    if function is None or arguments is None or text(function) not in kinds:
        return None
    args = [strip_parens(a) for a in arguments.named_children if a.type != "comment"]
    if len(args) != 2:
        return None
    mine = [a for a in args if a.type == "identifier" and text(a) == var]
    others = [a for a in args if var not in identifiers(a)]
    return (var, kinds[text(function)]) if len(mine) == 1 and len(others) == 1 else None


def _if_reduction(node: Node) -> tuple[str, str] | None:
    condition, consequence = field(node, "condition"), field(node, "consequence")
    if condition is None or consequence is None or field(node, "alternative") is not None:
        return None
    inner = statements(consequence)
    if len(inner) != 1 or inner[0].type != "expression_statement":
        return None
    assignment = inner[0].named_children[0] if inner[0].named_child_count else None
    if assignment is None or assignment.type != "assignment_expression":
        return None
    left, value = field(assignment, "left"), field(assignment, "right")
    if operator(assignment) != "=" or left is None or value is None or left.type != "identifier":
        return None
    return _selection_reduction(text(left), condition, value, left)


def _selection_reduction(
    var: str, condition: Node, chosen: Node, otherwise: Node
) -> tuple[str, str] | None:
    """`var = (a > b) ? chosen : otherwise` keeps the larger or the smaller of var and e."""
    compared = strip_parens(condition)
    a, b = field(compared, "left"), field(compared, "right")
    op = operator(compared)
    if compared.type != "binary_expression" or a is None or b is None:
        return None
    if op not in (">", ">=", "<", "<=") or squashed(otherwise) != var:
        return None
    if squashed(a) == squashed(chosen) and squashed(b) == var:
        picks_greater = op in (">", ">=")  # `a > var ? a : var`
    elif squashed(b) == squashed(chosen) and squashed(a) == var:
        picks_greater = op in ("<", "<=")  # `var < b ? b : var`
    else:
        return None
    if var in identifiers(chosen):
        return None
    return var, "max" if picks_greater else "min"


def _only_written_by(body: Node, var: str, statements_: list[Node]) -> bool:
    for node in walk(body):
        target = written_target(node)
        if target is None or text(strip_parens(target)) != var:
            continue
        if not any(contains(statement, node) for statement in statements_):
            return False
    return True


def _is_scalar_at(var: str, loop: Node) -> bool:
    found = visible_declaration(var, loop)
    return found is not None and is_scalar_declarator(found[1])


def _carried(
    loop: Node, header: _Header | None, reduction_statements: dict[str, list[Node]]
) -> bool:
    body = field(loop, "body")
    if body is None:
        return False
    written = written_names(body) - declared_names(loop)
    for node in walk(body):
        if node.type != "identifier" or text(node) not in written or _is_plain_store(node):
            continue
        accumulations = reduction_statements.get(text(node), [])
        if not any(contains(statement, node) for statement in accumulations):
            return True  # read beyond its own accumulation: a scan, a search, a recurrence
    derived = _derived_from_loop_variable(loop, header)
    for node in walk(body):
        target = written_target(node)
        is_element = target is not None and strip_parens(target).type == "subscript_expression"
        if is_element and target is not None and not set(identifiers(target)) & derived:
            return True
    return False


def _is_plain_store(identifier: Node) -> bool:
    parent = identifier.parent
    return (
        parent is not None
        and parent.type == "assignment_expression"
        and operator(parent) == "="
        and same(field(parent, "left"), identifier)
    )


def _derived_from_loop_variable(loop: Node, header: _Header | None) -> set[str]:
    """The loop variable and the locals whose initialisers (transitively) use it."""
    update = field(loop, "update")
    derived = {header.var} if header else (written_names(update) if update else set())
    body = field(loop, "body")
    declarations = [n for n in walk(body) if n.type == "declaration"] if body else []
    while True:
        before = len(derived)
        for declaration in declarations:
            for declarator in declarators(declaration):
                value, name = field(declarator, "value"), declarator_name(declarator)
                if value is not None and name is not None and set(identifiers(value)) & derived:
                    derived.add(name)
        if len(derived) == before:
            return derived


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


# --- preconditions --------------------------------------------------------------------------


def _fail(strategy: Strategy, loop: _Loop | None, why: str) -> NoReturn:
    where = f" loop {loop.info.id} (line {loop.info.line})" if loop is not None else ""
    raise TransformError(f"{strategy.name}:{where} {why}")


def _choice(strategy: Strategy, key: str, allowed: tuple[Any, ...], default: Any = None) -> Any:
    value = strategy.param(key, default)
    if value not in allowed:
        options = ", ".join(str(option) for option in allowed)
        raise TransformError(f"{strategy.name}: {key} must be one of {options}, not {value!r}")
    return value


def _canonical(strategy: Strategy, loop: _Loop) -> _Header:
    if loop.header is None:
        _fail(strategy, loop, "is not a canonical `for (T v = a; v < b; ++v or v += c)` loop")
    return loop.header


def _innermost(strategy: Strategy, loop: _Loop) -> None:
    if loop.info.children:
        _fail(strategy, loop, f"is not innermost (it contains {', '.join(loop.info.children)})")


def _no_pragmas(strategy: Strategy, loop: _Loop) -> None:
    if loop.pragmas:
        pragma = loop.pragmas[0]
        _fail(
            strategy,
            loop,
            f"already has `#pragma {pragma_text(pragma)}` (line {line_of(pragma)}); gcc takes "
            "one loop pragma per loop",
        )


def _no_escape(strategy: Strategy, loop: _Loop) -> None:
    body = field(loop.node, "body")
    escape = escapes(body) if body is not None else None
    if escape is not None:
        _fail(strategy, loop, f"leaves the loop early (line {line_of(escape)}); OpenMP forbids it")


def _outside_parallel_regions(kernel: _Kernel, strategy: Strategy, loop: _Loop) -> None:
    for ancestor in kernel.ancestors(loop):
        if ancestor.info.has_pragma:
            _fail(strategy, loop, f"is inside {ancestor.info.id}, which has an omp pragma")
    for inner in kernel.descendants(loop):
        if any("parallel" in pragma_text(p).split() for p in inner.pragmas):
            _fail(strategy, loop, f"contains {inner.info.id}, which is already parallel")


def _no_simd_ancestor(kernel: _Kernel, strategy: Strategy, loop: _Loop) -> None:
    for ancestor in kernel.ancestors(loop):
        if any("simd" in pragma_text(p).split() for p in ancestor.pragmas):
            _fail(strategy, loop, f"is inside {ancestor.info.id}, which is already simd")


def _not_in_collapsed_nest(kernel: _Kernel, strategy: Strategy, loop: _Loop) -> None:
    """Nothing may be put between the loops of a collapse(n) nest."""
    child = loop
    for distance, ancestor in enumerate(kernel.ancestors(loop), start=1):
        if ancestor.info.perfect_child != child.info.id:
            return
        for pragma in ancestor.pragmas:
            if _collapse_depth(pragma_text(pragma)) > distance:
                _fail(
                    strategy,
                    loop,
                    f"is inside the collapsed nest of {ancestor.info.id} (line "
                    f"{line_of(pragma)}): nothing may come between its loops",
                )
        child = ancestor


def _collapse_depth(pragma: str) -> int:
    _, found, rest = pragma.partition("collapse(")
    depth = rest.partition(")")[0].strip()
    return int(depth) if found and depth.isdigit() else 1


def _perfect_child_loop(kernel: _Kernel, strategy: Strategy, loop: _Loop) -> _Loop:
    child = kernel.by_id(loop.info.perfect_child)
    if child is None:
        _fail(strategy, loop, "has no perfectly nested child loop (its body is not one for loop)")
    return child


def _rectangular(strategy: Strategy, outer: _Loop, inner: _Loop) -> None:
    outer_var = _canonical(strategy, outer).var
    header = _header_parts(inner.node)
    if any(outer_var in identifiers(part) for part in header):
        _fail(strategy, outer, f"the bounds of {inner.info.id} depend on {outer_var}")


def _header_parts(node: Node) -> list[Node]:
    parts = (field(node, name) for name in ("initializer", "condition", "update"))
    return [part for part in parts if part is not None]


# --- editing helpers ------------------------------------------------------------------------


def _prefix(kernel: _Kernel, anchor: Node, lines: list[str]) -> list[Edit]:
    """Edits that put `lines` (pragmas or declarations) on their own lines before `anchor`."""
    source = kernel.source
    begin = line_start(source, anchor.start_byte)
    at_line_start = not source[begin : anchor.start_byte].strip()
    indent = indentation(source, anchor.start_byte)
    block = "".join(f"{indent}{line}\n" for line in lines)
    parent = anchor.parent
    if parent is not None and parent.type == "compound_statement":
        if at_line_start:
            return [insertion(begin, block)]
        gap = len(source[: anchor.start_byte].rstrip(b" \t"))  # `{ for`: break the line there
        return [Edit(gap, anchor.start_byte, f"\n{block}{indent}".encode())]
    # A braceless body (`for (...) for (...)`): a block keeps the new lines with the loop.
    opening = f"{indent}{{\n{block}" if at_line_start else f"{{\n{block}{indent}"
    return [
        insertion(begin if at_line_start else anchor.start_byte, opening),
        insertion(anchor.end_byte, f"\n{indent}}}"),
    ]


def _header_text(kernel: _Kernel, node: Node) -> str:
    """`for (...)` as written."""
    closing = [child for child in node.children if child.type == ")"][-1]
    return kernel.source[node.start_byte : closing.end_byte].decode("utf-8")


def _header_parens(node: Node) -> tuple[int, int]:
    opening = next(child for child in node.children if child.type == "(")
    closing = [child for child in node.children if child.type == ")"][-1]
    return opening.start_byte, closing.end_byte


def _indent_unit(kernel: _Kernel, loop: _Loop) -> str:
    base = indentation(kernel.source, loop.node.start_byte)
    body = field(loop.node, "body")
    inner = statements(body) if body is not None else []
    if inner and inner[0].start_point.row != loop.node.start_point.row:
        deeper = indentation(kernel.source, inner[0].start_byte)
        if deeper.startswith(base) and len(deeper) > len(base):
            return deeper[len(base) :]
    return "    "


def _rewritten(kernel: _Kernel, node: Node, edits: list[Edit]) -> str:
    """The text of `node` with edits (in source offsets) applied inside it."""
    shifted = [
        Edit(e.start - node.start_byte, e.end - node.start_byte, e.replacement) for e in edits
    ]
    return apply_edits(kernel.source[node.start_byte : node.end_byte], shifted).decode("utf-8")


def _fresh_name(wanted: str, used: set[str]) -> str:
    name = wanted if wanted.isidentifier() else f"t_{wanted}"
    candidate, counter = name, 1
    while candidate in used:
        candidate, counter = f"{name}_{counter}", counter + 1
    used.add(candidate)
    return candidate


def _operand(node: Node) -> str:
    """The expression's text, parenthesised unless it is atomic."""
    inner = text(node)
    return inner if node.type in _ATOMIC_EXPRESSIONS else f"({inner})"


# --- the strategies -----------------------------------------------------------------------


def _reduction_clauses(loop: _Loop) -> list[str]:
    grouped: dict[str, list[str]] = {}
    for var, op in loop.info.reductions:
        grouped.setdefault(_OMP_REDUCTION[op], []).append(var)
    return [f"reduction({op}:{','.join(names)})" for op, names in grouped.items()]


def _parallelisable(kernel: _Kernel, strategy: Strategy, loop: _Loop) -> None:
    """What OpenMP asks of a loop it shares out: canonical, no pragma yet, not inside or around
    a parallel region, no early exit, not between the loops of a collapsed nest."""
    _canonical(strategy, loop)
    _no_pragmas(strategy, loop)
    _outside_parallel_regions(kernel, strategy, loop)
    _no_escape(strategy, loop)
    _not_in_collapsed_nest(kernel, strategy, loop)


def _omp_parallel_for(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    loop = kernel.loop(strategy)
    schedule = _choice(strategy, "schedule", SCHEDULES)
    collapse = _choice(strategy, "collapse", COLLAPSES, default=1)
    _parallelisable(kernel, strategy, loop)
    clauses = [f"schedule({schedule})"]
    if collapse == 2:
        child = _perfect_child_loop(kernel, strategy, loop)
        _canonical(strategy, child)
        _rectangular(strategy, loop, child)
        clauses.append("collapse(2)")
    pragma = " ".join(["#pragma omp parallel for", *clauses, *_reduction_clauses(loop)])
    return _prefix(kernel, loop.node, [pragma])


def _omp_parallel_private(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    """The loop in a parallel region that allocates its scratch buffers once per thread, then
    shares out the iterations; a thread without memory makes the kernel return 1."""
    loop = kernel.loop(strategy)
    _parallel_private_preconditions(kernel, strategy, loop)
    buffers = _scratch_buffers(kernel, loop)
    if not buffers:
        _fail(strategy, loop, "uses no buffer declared before it as `T *b = malloc(...);` (or "
                              "calloc) and only freed after it")  # fmt: skip
    used = set(identifiers(kernel.tree.root_node))
    failed, ready = _fresh_name("kope_failed", used), _fresh_name("kope_ready", used)
    body = field(loop.node, "body")
    assert body is not None and body.type == "compound_statement"  # checked above
    inner = statements(body)
    guard_indent = indentation(kernel.source, inner[0].start_byte) if inner else ""
    guarded = _rewritten(kernel, loop.node, [
        insertion(body.start_byte + 1, f"\n{guard_indent}if (!{ready}) continue;")
    ])  # fmt: skip
    names = [name for name, _ in buffers]
    indent, unit = indentation(kernel.source, loop.node.start_byte), _indent_unit(kernel, loop)
    clauses = " ".join(["schedule(static)", *_reduction_clauses(loop)])
    lines = [
        "{",
        f"{unit}int {failed} = 0;",
        f"{unit}#pragma omp parallel",
        f"{unit}{{",
        *(f"{unit * 2}{line}" for _, declaration in buffers
          for line in _relocated(kernel, declaration, text(declaration))),
        f"{unit * 2}int {ready} = {' && '.join(f'{name} != NULL' for name in names)};",
        f"{unit * 2}if (!{ready}) {{",
        f"{unit * 3}#pragma omp atomic write",
        f"{unit * 3}{failed} = 1;",
        f"{unit * 2}}}",
        f"{unit * 2}#pragma omp for {clauses}",
        *(f"{unit * 2}{line}" for line in _relocated(kernel, loop.node, guarded)),
        *(f"{unit * 2}free({name});" for name in names),
        f"{unit}}}",
        f"{unit}if ({failed}) return 1; /* a thread had no memory for its buffers */",
        "}",
    ]  # fmt: skip
    return [replacement(loop.node, ("\n" + indent).join(lines))]


def _parallel_private_preconditions(kernel: _Kernel, strategy: Strategy, loop: _Loop) -> None:
    _parallelisable(kernel, strategy, loop)
    if loop.info.depth != 0:
        _fail(strategy, loop, "is inside another loop (the region's `return 1` must not be)")
    body = field(loop.node, "body")
    if body is None or body.type != "compound_statement":
        _fail(strategy, loop, "has no braces around its body")


def _scratch_buffers(kernel: _Kernel, loop: _Loop) -> list[tuple[str, Node]]:
    """(name, declaration) of each `T *b = malloc(...);` or `calloc` before the loop, in the
    same block, that the loop reads and nothing after it uses but `free(b)`."""
    block = loop.node.parent
    if block is None or block.type != "compound_statement":
        return []
    siblings = statements(block)
    position = next(i for i, s in enumerate(siblings) if same(s, loop.node))
    inside = set(identifiers(loop.node))
    found = []
    for statement in siblings[:position]:
        name = _allocated_pointer(statement)
        if name is None or name not in inside:
            continue
        if all(_only_freed(after, name) for after in siblings[position + 1 :]):
            found.append((name, statement))
    return found


def _allocated_pointer(statement: Node) -> str | None:
    """b for a declaration `T *b = malloc(...);` (or calloc, through casts)."""
    found = declarators(statement) if statement.type == "declaration" else []
    if len(found) != 1 or found[0].type != "init_declarator":
        return None
    pointer, value = field(found[0], "declarator"), field(found[0], "value")
    if pointer is None or value is None or pointer.type != "pointer_declarator":
        return None
    call = strip_parens_and_casts(value)
    function = field(call, "function")
    if call.type != "call_expression" or function is None:
        return None
    return declarator_name(pointer) if text(function) in ("malloc", "calloc") else None


def _only_freed(statement: Node, name: str) -> bool:
    for node in walk(statement):
        if node.type != "identifier" or text(node) != name:
            continue
        call = node.parent.parent if node.parent is not None else None
        function = field(call, "function") if call is not None else None
        if call is None or call.type != "call_expression" or function is None:
            return False
        if text(function) != "free":
            return False
    return True


def _omp_simd(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    loop = kernel.loop(strategy)
    _canonical(strategy, loop)
    _innermost(strategy, loop)
    _no_pragmas(strategy, loop)
    _no_simd_ancestor(kernel, strategy, loop)
    _no_escape(strategy, loop)
    _not_in_collapsed_nest(kernel, strategy, loop)
    return _prefix(kernel, loop.node, [" ".join(["#pragma omp simd", *_reduction_clauses(loop)])])


def _unroll(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    loop = kernel.loop(strategy)
    factor = _choice(strategy, "factor", UNROLL_FACTORS)
    _innermost(strategy, loop)
    _no_pragmas(strategy, loop)
    if field(loop.node, "condition") is None:
        _fail(strategy, loop, "has no condition (gcc unrolls only a loop with one)")
    _not_in_collapsed_nest(kernel, strategy, loop)
    return _prefix(kernel, loop.node, [f"#pragma GCC unroll {factor}"])


def _interchange(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    loop = kernel.loop(strategy)
    child = _perfect_child_loop(kernel, strategy, loop)
    _canonical(strategy, loop)
    _canonical(strategy, child)
    _rectangular(strategy, loop, child)
    outer, inner = _header_parens(loop.node), _header_parens(child.node)
    source = kernel.source
    return [
        Edit(outer[0], outer[1], source[inner[0] : inner[1]]),
        Edit(inner[0], inner[1], source[outer[0] : outer[1]]),
    ]


@dataclass(frozen=True)
class _Accumulation:
    """`for j { T acc = init; for p { acc OP= term; } ...; out[..] = f(acc); }`"""

    accumulator: str
    initial: Node
    inner: _Loop
    operator: str  # "+=", "-=" or "*="
    term: Node
    epilogue: list[Node]
    store: Node  # out[..], the last statement's target
    store_value: Node


@dataclass(frozen=True)
class _Leading:
    """A loop body that starts `T acc = init; for (...) ...`, and what follows."""

    declaration: Node
    accumulator: str
    initial: Node
    loop: Node  # the `for` statement after the declaration
    after: list[Node]


def _leading_accumulator(loop: _Loop) -> _Leading | None:
    """The loop's body as one initialised scalar, a loop and the rest; None when it does not
    start that way."""
    body = field(loop.node, "body")
    parts = statements(body) if body is not None and body.type == "compound_statement" else []
    if len(parts) < 2 or parts[0].type != "declaration" or parts[1].type != "for_statement":
        return None
    found = declarators(parts[0])
    initial = field(found[0], "value") if len(found) == 1 else None
    name = field(found[0], "declarator") if len(found) == 1 else None
    if initial is None or name is None or name.type != "identifier":
        return None
    return _Leading(parts[0], text(name), initial, parts[1], parts[2:])


def _accumulate_in_output(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    """Rewrites the whole loop from its statements' texts: comments between them are lost."""
    loop = kernel.loop(strategy)
    _canonical(strategy, loop)
    _no_pragmas(strategy, loop)
    _not_in_collapsed_nest(kernel, strategy, loop)
    shape = _accumulation(kernel, strategy, loop)
    indent, unit = indentation(kernel.source, loop.node.start_byte), _indent_unit(kernel, loop)
    outer, inner = _header_text(kernel, loop.node), _header_text(kernel, shape.inner.node)
    target = text(shape.store)
    lines = [
        f"{outer} {{",
        f"{unit}{target} = {text(shape.initial)};",
        "}",
        f"{inner} {{",
        f"{unit}{outer} {{",
        f"{unit * 2}{target} {shape.operator} {text(shape.term)};",
        f"{unit}}}",
        "}",
    ]
    value = strip_parens_and_casts(shape.store_value)
    if len(shape.epilogue) > 1 or text(value) != shape.accumulator:
        # The rest of the epilogue (bias, activation, scaling) becomes a pass over the row.
        rewritten = [_reading_output(kernel, s, shape.accumulator, target) for s in shape.epilogue]
        lines += [f"{outer} {{", *(f"{unit}{statement}" for statement in rewritten), "}"]
    return [replacement(loop.node, ("\n" + indent).join(lines))]


def _reading_output(kernel: _Kernel, statement: Node, accumulator: str, target: str) -> str:
    """The statement's text with each read of the accumulator replaced by the output element."""
    reads = [n for n in walk(statement) if n.type == "identifier" and text(n) == accumulator]
    return _rewritten(kernel, statement, [replacement(n, target) for n in reads])


def _accumulation(kernel: _Kernel, strategy: Strategy, loop: _Loop) -> _Accumulation:
    def not_applicable(why: str) -> NoReturn:
        _fail(
            strategy, loop, f"{why} (wanted `T acc = init; for (...) acc += ...; out[..] = acc;`)"
        )

    leading = _leading_accumulator(loop)
    if leading is None or not leading.after:
        not_applicable("its body is not one initialised scalar, a loop and a store")
    accumulator, initial, inner_node = leading.accumulator, leading.initial, leading.loop
    epilogue = leading.after
    inner = kernel.at(inner_node)
    _canonical(strategy, inner)
    own_var = _canonical(strategy, loop).var
    if {own_var, accumulator} & {
        n for part in _header_parts(inner_node) for n in identifiers(part)
    }:
        not_applicable(f"the bounds of {inner.info.id} depend on {own_var} or {accumulator}")
    step = _single_accumulation(inner, accumulator)
    if step is None:
        not_applicable(f"the body of {inner.info.id} is not one `{accumulator} += ...;`")
    store = _final_store(epilogue, accumulator, own_var)
    if store is None:
        not_applicable(f"the statements after {inner.info.id} do not end in one store of the sum")
    array = strip_parens_and_casts(field(store[0], "argument") or store[0])
    read_elsewhere = identifiers(step[1]) + identifiers(initial) + identifiers(inner_node)
    if array.type != "identifier" or text(array) in read_elsewhere:
        not_applicable(f"the output {text(array)} is also read while summing")
    if _mentions_outside(epilogue, text(array), store[0]):
        not_applicable(f"the output {text(array)} is read again after the sum")
    return _Accumulation(accumulator, initial, inner, step[0], step[1], epilogue, *store)


def _mentions_outside(statements_: list[Node], name: str, allowed: Node) -> bool:
    return any(
        n.type == "identifier" and text(n) == name and not contains(allowed, n)
        for statement in statements_
        for n in walk(statement)
    )


def _single_accumulation(inner: _Loop, accumulator: str) -> tuple[str, Node] | None:
    """(`+=`, term) when the loop body is exactly `acc += term;` (or `acc = acc + term;`)."""
    body = field(inner.node, "body")
    parts = statements(body) if body is not None else []
    return _accumulation_step(parts[0], accumulator) if len(parts) == 1 else None


def _accumulation_step(statement: Node, accumulator: str) -> tuple[str, Node] | None:
    """(`+=`, term) when the statement is `acc += term;` (or `acc = acc + term;`)."""
    if statement.type != "expression_statement" or not statement.named_children:
        return None
    step = statement.named_children[0]
    left, right = field(step, "left"), field(step, "right")
    if step.type != "assignment_expression" or left is None or right is None:
        return None
    if left.type != "identifier" or text(left) != accumulator:
        return None
    if operator(step) in ("+=", "-=", "*="):
        return (operator(step), right) if accumulator not in identifiers(right) else None
    value = strip_parens(right)
    if operator(step) != "=" or value.type != "binary_expression":
        return None
    if _binary_reduction(accumulator, value) is None:
        return None
    value_left, value_right = field(value, "left"), field(value, "right")
    assert value_left is not None and value_right is not None  # checked by _binary_reduction
    term = value_right if text(strip_parens(value_left)) == accumulator else value_left
    return operator(value) + "=", term


def _final_store(epilogue: list[Node], accumulator: str, var: str) -> tuple[Node, Node] | None:
    """(out[..], value) when the epilogue is declarations then `out[..] = value;`, the index
    uses the loop variable, and the accumulator is only read."""
    if not epilogue or any(s.type != "declaration" for s in epilogue[:-1]):
        return None
    last = epilogue[-1]
    step = last.named_children[0] if last.type == "expression_statement" else None
    if step is None or step.type != "assignment_expression" or operator(step) != "=":
        return None
    target, value = field(step, "left"), field(step, "right")
    if target is None or value is None or target.type != "subscript_expression":
        return None
    local = {n for s in epilogue for n in declared_names(s)}
    used = set(identifiers(target))
    if var not in used or used & (local | {accumulator}):
        return None
    if any(accumulator in written_names(s) for s in epilogue):
        return None
    return target, value


def _tile(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    loop = kernel.loop(strategy)
    size = _choice(strategy, "size", TILE_SIZES)
    child = _perfect_child_loop(kernel, strategy, loop)
    outer, inner = _canonical(strategy, loop), _canonical(strategy, child)
    _rectangular(strategy, loop, child)
    if "<=" in (outer.comparison, inner.comparison) or (outer.step, inner.step) != (1, 1):
        _fail(strategy, loop, "tiles only loops `for (v = a; v < b; ++v)` (step 1, `<`)")
    child_body = field(child.node, "body")
    assert child_body is not None  # a canonical loop has a body
    used = set(identifiers(kernel.tree.root_node))
    blocks = [_fresh_name(h.var * 2, used) for h in (outer, inner)]
    indent, unit = indentation(kernel.source, loop.node.start_byte), _indent_unit(kernel, loop)

    def block_loop(header: _Header, block: str) -> str:
        kind = header.declared_type or "int64_t"
        return (
            f"for ({kind} {block} = {text(header.start)}; {block} < {_operand(header.bound)}; "
            f"{block} += {size})"
        )

    def element_loop(header: _Header, block: str) -> str:
        declared = f"{header.declared_type} " if header.declared_type else ""
        bound = _operand(header.bound)
        end = f"({block} + {size} < {bound} ? {block} + {size} : {bound})"
        return (
            f"for ({declared}{header.var} = {block}; {header.var} < {end}; {text(header.update)})"
        )

    body = reindented(text(child_body), unit * 2)
    if child_body.type != "compound_statement":  # a braceless body gets its own lines
        body = f"{{\n{indent}{unit * 4}{body}\n{indent}{unit * 3}}}"
    lines = [
        f"{block_loop(outer, blocks[0])} {{",
        f"{unit}{block_loop(inner, blocks[1])} {{",
        f"{unit * 2}{element_loop(outer, blocks[0])} {{",
        f"{unit * 3}{element_loop(inner, blocks[1])} {body}",
        f"{unit * 2}}}",
        f"{unit}}}",
        "}",
    ]
    return [replacement(loop.node, ("\n" + indent).join(lines))]


def _hoist_invariant(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    loop = kernel.loop(strategy)
    _not_in_collapsed_nest(kernel, strategy, loop)
    body = field(loop.node, "body")
    assert body is not None
    varying = declared_names(loop.node) | written_names(loop.node)
    divisions = _invariant_divisions(kernel, body, varying)
    products = [
        p
        for p in _invariant_products(kernel, body, varying)
        if not any(contains(divisor, p) for _, divisor in divisions)
    ]
    if not products and not divisions:
        _fail(strategy, loop, "has no loop-invariant index product or division to hoist")
    used = set(identifiers(kernel.tree.root_node))
    temporaries: dict[str, str] = {}
    lines: list[str] = []
    edits: list[Edit] = []
    for product in products:
        key = squashed(product)
        if key not in temporaries:
            temporaries[key] = _fresh_name(_name_from(product, "offset"), used)
            ctype = expression_type(product, kernel.types)
            assert ctype is not None  # checked by _invariant_products
            definition = text(strip_parens(product))
            lines.append(f"const {ctype.base} {temporaries[key]} = {definition};")
        edits.append(replacement(product, temporaries[key]))
    for division, divisor in divisions:
        key = "1/" + squashed(divisor)
        if key not in temporaries:
            name = temporaries[key] = _fresh_name("inv_" + _name_from(divisor, "d"), used)
            ctype = expression_type(division, kernel.types)
            assert ctype is not None  # checked by _invariant_divisions
            one = "1.0f" if ctype.base == "float" else "1.0"
            lines.append(
                f"const {ctype.base} {name} = {one} / {_operand(divisor)}; "
                "/* a reciprocal: changes rounding */"
            )
        slash = division.child_by_field_name("operator")
        assert slash is not None
        edits.append(Edit(slash.start_byte, divisor.end_byte, f"* {temporaries[key]}".encode()))
    anchor = loop.pragmas[0] if loop.pragmas else loop.node
    return _prefix(kernel, anchor, lines) + edits


def _name_from(expression: Node, fallback: str) -> str:
    names = identifiers(expression)
    return "_".join(names) if 0 < len(names) <= 3 else fallback


def _invariant_products(kernel: _Kernel, body: Node, varying: set[str]) -> list[Node]:
    """The largest integer expressions of invariant names and literals (+, -, *) in the body
    that multiply something: `i * k`, `(b * c + ch) * h`."""
    found, stack = [], [body]
    while stack:
        node = stack.pop()
        if (
            node.type in ("binary_expression", "parenthesized_expression")
            and _is_invariant_integer(kernel, node, varying)
            and any(n.type == "binary_expression" and operator(n) == "*" for n in walk(node))
            and identifiers(node)
        ):
            found.append(node)
            continue
        stack.extend(reversed(node.children))
    return found


def _is_invariant_integer(kernel: _Kernel, node: Node, varying: set[str]) -> bool:
    node = strip_parens(node)
    if node.type == "identifier":
        ctype = kernel.types.get(text(node))
        return text(node) not in varying and ctype is not None and ctype.is_signed_integer
    if node.type == "number_literal":
        ctype = expression_type(node, kernel.types)
        return ctype is not None and ctype.is_signed_integer
    if node.type == "binary_expression" and operator(node) in ("+", "-", "*"):
        left, right = field(node, "left"), field(node, "right")
        return all(
            side is not None and _is_invariant_integer(kernel, side, varying)
            for side in (left, right)
        )
    return False


def _invariant_divisions(kernel: _Kernel, body: Node, varying: set[str]) -> list[tuple[Node, Node]]:
    """(x / d, d) for floating-point divisions in the body by a loop-invariant d."""
    found = []
    for node in walk(body):
        divisor = field(node, "right") if node.type == "binary_expression" else None
        if divisor is None or operator(node) != "/":
            continue
        ctype = expression_type(node, kernel.types)
        if ctype is None or not ctype.is_float or not identifiers(divisor):
            continue
        if _is_invariant_value(kernel, divisor, varying):
            found.append((node, divisor))
    return found


def _is_invariant_value(kernel: _Kernel, node: Node, varying: set[str]) -> bool:
    """Arithmetic on invariant numeric scalars and literals, with casts: no calls, no loads."""
    node = strip_parens(node)
    if node.type == "identifier":
        ctype = kernel.types.get(text(node))
        numeric = ctype is not None and (ctype.is_float or ctype.is_signed_integer)
        return text(node) not in varying and numeric
    if node.type == "number_literal":
        return True
    if node.type in ("cast_expression", "unary_expression"):
        inner = field(node, "value") or field(node, "argument")
        ctype = expression_type(node, kernel.types)
        numeric = ctype is not None and (ctype.is_float or ctype.is_signed_integer)
        return inner is not None and numeric and _is_invariant_value(kernel, inner, varying)
    if node.type == "binary_expression" and operator(node) in ("+", "-", "*"):
        left, right = field(node, "left"), field(node, "right")
        return all(
            side is not None and _is_invariant_value(kernel, side, varying)
            for side in (left, right)
        )
    return False


def _restrict_pointers(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    edits = [edit for function in kernel.functions for edit in _restrictable(function)]
    if not edits:
        _fail(strategy, None, "no unrestricted pointer is initialised from inputs/outputs .data")
    return edits


def _restrictable(function: Node) -> list[Edit]:
    tensors = set(parameter_names(function)[0:3:2])  # inputs, outputs
    pointers: dict[str, list[Node]] = {}  # per tensor, the pointers declared to its data
    for node in walk(function):
        if node.type != "declaration":
            continue
        for declarator in declarators(node):
            pointer, value = field(declarator, "declarator"), field(declarator, "value")
            if pointer is None or value is None or pointer.type != "pointer_declarator":
                continue
            tensor = _tensor_of_data(value, tensors)
            if tensor is not None:
                pointers.setdefault(tensor, []).append(pointer)
    # Two pointers to one tensor's data alias: `restrict` on them would say they do not.
    alone = [found[0] for found in pointers.values() if len(found) == 1]
    return [edit for edit in map(_restricted, alone) if edit is not None]


# The functions glibc's libmvec has vector versions of on x86_64 (exp, log, sin, cos and pow
# since glibc 2.22, erf and tanh since 2.35), as math.h declares them.
VECTOR_MATH_PROTOTYPES = {
    **{name: f"float {name}(float);" for name in ("expf", "logf", "erff", "tanhf", "sinf", "cosf")},
    **{name: f"double {name}(double);" for name in ("exp", "log", "erf", "tanh", "sin", "cos")},
    "powf": "float powf(float, float);",
    "pow": "double pow(double, double);",
}
DECLARE_SIMD = "#pragma omp declare simd notinbranch"


def _vector_math(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    """Each math function the loops call, that libmvec has and the kernel does not declare simd
    yet, declared simd after the includes: gcc then calls its vector version on whole
    vectors, given -fno-math-errno (math.h declares them only under -ffast-math, which also
    assumes no infinities: sigmoid's 1 / (1 + expf(-x)) came out NaN for x below -88)."""
    in_loops = frozenset().union(*_loop_calls(kernel).values())
    wanted = sorted(in_loops & VECTOR_MATH_PROTOTYPES.keys() - _declared_simd(kernel))
    if not wanted:
        _fail(strategy, None, "no loop calls a math function libmvec has (or all are declared)")
    lines = [f"{DECLARE_SIMD}\n{VECTOR_MATH_PROTOTYPES[name]}\n" for name in wanted]
    return [insertion(_after_includes(kernel), "".join(lines))]


def _declared_simd(kernel: _Kernel) -> set[str]:
    """The functions declared at file scope right after an `omp declare simd` pragma."""
    top = kernel.tree.root_node.children
    names = (declarator_name(declarator)
             for pragma, declaration in itertools.pairwise(top)
             if is_pragma(pragma) and "declare simd" in pragma_text(pragma)
             for declarator in declarators(declaration))  # fmt: skip
    return {name for name in names if name is not None}


def _after_includes(kernel: _Kernel) -> int:
    """Where file-scope declarations may go: after the last `#include` before the kernel."""
    includes = [
        node
        for node in kernel.tree.root_node.children
        if node.type == "preproc_include" and node.end_byte <= kernel.function.start_byte
    ]
    return includes[-1].end_byte if includes else 0


def _restricted(pointer: Node) -> Edit | None:
    """The edit that declares `pointer` (`*p`) restrict; None where it is already."""
    name = field(pointer, "declarator")
    qualifiers = [text(c) for c in pointer.children if c.type == "type_qualifier"]
    if name is None or name.type != "identifier" or "restrict" in qualifiers:
        return None
    return insertion(name.start_byte, "restrict ")


def _tensor_of_data(value: Node, tensors: set[str]) -> str | None:
    """The tensor whose data `value` points to: `inputs[0]` for `(T *)inputs[0].data` and for
    `inputs->data`; None for any other value."""
    value = strip_parens_and_casts(value)
    member, tensor = field(value, "field"), field(value, "argument")
    if value.type != "field_expression" or member is None or tensor is None:
        return None
    holder = strip_parens(tensor)
    if holder.type == "subscript_expression":
        holder = strip_parens(field(holder, "argument") or holder)
    if text(member) != "data" or holder.type != "identifier" or text(holder) not in tensors:
        return None
    arrow = any(child.type == "->" for child in value.children)
    return f"{squashed(tensor)}[0]" if arrow else squashed(tensor)


def _float_accumulator(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    loop = kernel.loop(strategy)
    edits: dict[tuple[int, int], Edit] = {}
    for var, _ in loop.info.reductions:
        found = visible_declaration(var, loop.node)
        type_node = field(found[0], "type") if found is not None else None
        if found is None or type_node is None or text(type_node) != "double":
            continue
        if len(declarators(found[0])) != 1:
            continue  # `double a, b;`: changing the type would change both
        edits[type_node.byte_range] = replacement(type_node, "float")
        for statement in loop.reduction_statements[var]:
            for cast in walk(statement):
                descriptor = field(cast, "type") if cast.type == "cast_expression" else None
                if descriptor is not None and squashed(descriptor) == "double":
                    edits[descriptor.byte_range] = replacement(descriptor, "float")
    if not edits:
        _fail(strategy, loop, "has no double accumulator")
    return list(edits.values())


@dataclass(frozen=True)
class _Operand:
    """A float array read as a matrix: element (row, col) at `array[offset + row*r + col*c]`."""

    array: str
    offset: str
    row_stride: str
    col_stride: str
    reads: frozenset[str]  # the names in offset and strides

    def at(self) -> str:
        return self.array if self.offset == "0" else f"{self.array} + ({self.offset})"


@dataclass(frozen=True)
class _MatmulNest:
    i: _Header
    j: _Header
    p: _Header
    shape: _Accumulation
    declaration: Node  # `T acc = 0;`
    a: _Operand  # rows i, columns p
    b: _Operand  # rows p, columns j


def _packed_gemm(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    loop = kernel.loop(strategy)
    kc = _choice(strategy, "kc", GEMM_K_SLABS)
    nest = _matmul_nest(kernel, strategy, loop)
    used = set(identifiers(kernel.tree.root_node))
    m, n, k = (_operand(h.bound) for h in (nest.i, nest.j, nest.p))
    operands = (
        f"{m}, {n}, {k}, {nest.a.at()}, {nest.a.row_stride}, {nest.a.col_stride}, "
        f"{nest.b.at()}, {nest.b.row_stride}, {nest.b.col_stride}"
    )
    output = _output_matrix(kernel, nest)
    if output is None:
        sums = _fresh_name("kope_sums", used)
        code = _through_sums(kernel, loop, nest, sums, operands, kc)
    else:
        lines = [f"{HELPER_NAME}({operands}, {output.at()}, {output.row_stride}, {kc});"]
        if not _only_stores_the_sum(nest):  # the rest of the epilogue reads the sums back
            lines += _epilogue_nest(kernel, loop, nest, text(nest.shape.store))
        indent = indentation(kernel.source, loop.node.start_byte)
        code = ("\n" + indent).join(lines)
    return _with_helper(kernel, loop.node, code)


def _with_helper(kernel: _Kernel, node: Node, code: str) -> list[Edit]:
    """`node` replaced by `code`, and the GEMM helper put before the function unless the
    kernel has it already."""
    edits = [replacement(node, code)]
    if HELPER_NAME not in identifiers(kernel.tree.root_node):
        at = line_start(kernel.source, kernel.function.start_byte)
        edits.append(insertion(at, HELPER_SOURCE + "\n"))
    return edits


def _scratch_names(kernel: _Kernel, strategy: Strategy, loop: _Loop, *roles: str) -> list[str]:
    """Fresh names for a lowering that keeps its buffers in scratch; an older helper, from
    before scratch existed, cannot give it any."""
    used = set(identifiers(kernel.tree.root_node))
    if _older_helper_lacks(used, SCRATCH_NAME):
        _fail(strategy, loop, f"the kernel has an older {HELPER_NAME}, without {SCRATCH_NAME}")
    return [_fresh_name(f"kope_{role}", used) for role in roles]


def _older_helper_lacks(used: set[str], name: str) -> bool:
    """Whether the kernel (its identifiers `used`) has a GEMM helper from before `name`."""
    return HELPER_NAME in used and name not in used


def _causal(sums: _Loop) -> bool:
    """Whether a row loop's sums run under a causal mask: `j <= i`."""
    return _header(sums).comparison == "<="


def _masked_helper_at_hand(kernel: _Kernel, strategy: Strategy, sums: _Loop) -> None:
    """A causal row loop's GEMM calls the masked one, which a helper from before it lacks."""
    used = set(identifiers(kernel.tree.root_node))
    if _causal(sums) and _older_helper_lacks(used, MASKED_HELPER_NAME):
        _fail(strategy, sums, f"the kernel has an older {HELPER_NAME}, without "
                              f"{MASKED_HELPER_NAME}")  # fmt: skip


def _gemm_call(sums: _Loop, mask: str) -> tuple[str, str]:
    """The helper a row loop's GEMM calls and what follows its slab argument: under a causal
    mask, the masked GEMM told what the mask leaves out (`mask`)."""
    return (MASKED_HELPER_NAME, f", {mask}") if _causal(sums) else (HELPER_NAME, "")


def _epilogue_nest(kernel: _Kernel, loop: _Loop, nest: _MatmulNest, element: str) -> list[str]:
    """The i-j nest again, each sum read from `element` instead of computed."""
    unit = _indent_unit(kernel, loop)
    (j_loop,) = [other for other in kernel.loops if other.info.id == loop.info.perfect_child]
    initial = field(declarators(nest.declaration)[0], "value")
    assert initial is not None  # _accumulation found it
    declaration = _rewritten(kernel, nest.declaration, [replacement(initial, element)])
    body = [declaration, *(text(s) for s in nest.shape.epilogue)]
    return [
        f"{_header_text(kernel, loop.node)} {{",
        f"{unit}{_header_text(kernel, j_loop.node)} {{",
        *(f"{unit * 2}{statement}" for statement in body),
        f"{unit}}}",
        "}",
    ]


def _through_sums(
    kernel: _Kernel, loop: _Loop, nest: _MatmulNest, sums: str, operands: str, kc: int
) -> str:
    """The sums into a buffer of their own, then the nest reading them from it."""
    indent, unit = indentation(kernel.source, loop.node.start_byte), _indent_unit(kernel, loop)
    m, n = _operand(nest.i.bound), _operand(nest.j.bound)
    element = f"{sums}[{nest.i.var} * {n} + {nest.j.var}]"
    lines = [
        "{",
        f"{unit}float *{sums} = malloc(sizeof(float) * ((size_t){m} * (size_t){n} + 1));",
        f"{unit}if ({sums} == NULL) return 1; /* could not allocate */",
        f"{unit}{HELPER_NAME}({operands}, {sums}, {n}, {kc});",
        *(
            f"{unit}{reindented(line, unit)}"
            for line in _epilogue_nest(kernel, loop, nest, element)
        ),
        f"{unit}free({sums});",
        "}",
    ]
    return ("\n" + indent).join(lines)


def _output_matrix(kernel: _Kernel, nest: _MatmulNest) -> _Operand | None:
    """The output the nest stores each sum's result to, when it is a float matrix with unit
    stride along j: the GEMM can store the sums there (the nest never reads it otherwise)."""
    output = _matrix_operand(kernel, nest.shape.store, nest.i.var, nest.j.var, nest.p.var)
    return output if output is not None and output.col_stride == "1" else None


def _only_stores_the_sum(nest: _MatmulNest) -> bool:
    value = strip_parens_and_casts(nest.shape.store_value)
    return len(nest.shape.epilogue) == 1 and text(value) == nest.shape.accumulator


def _matmul_nest(kernel: _Kernel, strategy: Strategy, loop: _Loop) -> _MatmulNest:
    def not_applicable(why: str) -> NoReturn:
        _fail(strategy, loop, f"{why} (wanted `for i for j {{ acc = 0; for p acc += "
                              "A[i,p] * B[p,j]; ... }`)")  # fmt: skip

    j_loop = _perfect_child_loop(kernel, strategy, loop)
    shape = _accumulation(kernel, strategy, j_loop)
    i_header, j_header, p_header = headers = [
        _canonical(strategy, each) for each in (loop, j_loop, shape.inner)
    ]
    for each in (loop, j_loop, shape.inner):
        _no_pragmas(strategy, each)
    _not_in_collapsed_nest(kernel, strategy, loop)
    _rectangular(strategy, loop, j_loop)
    _rectangular(strategy, loop, shape.inner)
    if any(text(h.start) != "0" or h.comparison != "<" or h.step != 1 for h in headers):
        not_applicable("its loops do not all run `for (v = 0; v < bound; ++v)`")
    if shape.operator != "+=" or not _is_zero(shape.initial):
        not_applicable(f"{shape.accumulator} does not start at 0 and only grow by +=")
    i, j, p = i_header.var, j_header.var, p_header.var
    changed = declared_names(loop.node) | written_names(loop.node)
    operands = _product_operands(kernel, shape.term, i, j, p)
    if operands is None:
        not_applicable(f"`{text(shape.term)}` is not a product of float matrices A[i,p], B[p,j]")
    a, b = operands
    read = {a.array, b.array, *a.reads, *b.reads}
    read |= {name for header in headers for name in identifiers(header.bound)}
    if read & changed:
        not_applicable(f"{', '.join(sorted(read & changed))} change inside the nest")
    body = field(j_loop.node, "body")
    assert body is not None  # _accumulation read it
    return _MatmulNest(i_header, j_header, p_header, shape, statements(body)[0], a, b)


def _is_zero(node: Node) -> bool:
    value = strip_parens_and_casts(node)
    if value.type != "number_literal":
        return False
    try:
        return float(text(value).rstrip("fFlL")) == 0.0
    except ValueError:
        return False


def _product_operands(
    kernel: _Kernel, term: Node, i: str, j: str, p: str
) -> tuple[_Operand, _Operand] | None:
    product = strip_parens_and_casts(term)
    left, right = field(product, "left"), field(product, "right")
    if product.type != "binary_expression" or operator(product) != "*" or not left or not right:
        return None
    for first, second in ((left, right), (right, left)):
        a = _matrix_operand(kernel, strip_parens_and_casts(first), i, p, j)
        b = _matrix_operand(kernel, strip_parens_and_casts(second), p, j, i)
        if a is not None and b is not None:
            return a, b
    return None


def _matrix_operand(
    kernel: _Kernel, node: Node, row: str, col: str, absent: str
) -> _Operand | None:
    """`X[offset + row*r + col*c]` (terms in any order) for a float array X."""
    array, index = field(node, "argument"), field(node, "index")
    if node.type != "subscript_expression" or array is None or index is None:
        return None
    ctype = kernel.types.get(text(array)) if array.type == "identifier" else None
    if ctype is None or ctype.base != "float" or ctype.pointers != 1:
        return None
    terms = _affine(index, {row, col, absent})
    if terms is None or absent in terms or row not in terms or col not in terms:
        return None
    reads = frozenset(identifiers(index)) - {row, col}
    return _Operand(text(array), terms.get("", "0"), terms[row], terms[col], reads)


def _affine(node: Node, variables: set[str]) -> dict[str, str] | None:
    """The index as {variable: coefficient, "": offset} when it is a sum of `v`, `v * e`,
    `e * v` and terms without the variables; None for anything else."""
    node = strip_parens(node)
    mentioned = set(identifiers(node)) & variables
    if not mentioned:
        return {"": text(node)}
    if node.type == "identifier":
        return {text(node): "1"}
    left, right = field(node, "left"), field(node, "right")
    if node.type != "binary_expression" or left is None or right is None:
        return None
    if operator(node) == "*":
        for var_side, factor in ((left, right), (right, left)):
            var_side = strip_parens(var_side)
            if var_side.type == "identifier" and text(var_side) in variables:
                if set(identifiers(factor)) & variables:
                    return None
                return {text(var_side): _operand(factor)}
        return None
    if operator(node) not in ("+", "-"):
        return None
    first, second = _affine(left, variables), _affine(right, variables)
    if first is None or second is None:
        return None
    if operator(node) == "-":
        if set(second) - {""}:
            return None  # a variable with a negative stride: not a matrix walk we pack
        second = {"": f"-({second['']})"}
    merged = dict(first)
    for key, value in second.items():
        merged[key] = f"{merged[key]} + {value}" if key in merged else value
    return merged


# --- a windowed reduction (a convolution) as one GEMM ----------------------------------------


@dataclass(frozen=True)
class _Window:
    """`for o { for i { for j { T acc = init; for ch { guards; for p { ...; acc += X * W; } }
    ...; out[..o..] = f(acc); } } }`: the row loop (o), the column loops (i, j), the window
    loops (ch, p, ...) with their guards, and the two sides of the product."""

    rows: _Loop
    columns: tuple[_Loop, ...]
    declaration: Node  # `T acc = init;`
    accumulator: str
    window: tuple[_Loop, ...]  # outermost first
    step: Node  # the `acc += X * W;` statement
    patch: Node  # X: reads no row variable
    weight: Node  # W: reads the row and window variables only
    epilogue: list[Node]


def _im2col_gemm(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    loop = kernel.loop(strategy)
    kc = _choice(strategy, "kc", GEMM_K_SLABS)
    nest = _windowed_nest(kernel, strategy, loop)
    roles = ("depth", "cols", "patches", "weights", "sums", "held")
    names = dict(zip(roles, _scratch_names(kernel, strategy, loop, *roles), strict=True))
    return _with_helper(kernel, loop.node, _lowered(kernel, nest, names, kc))


def _not_a_fallback(strategy: Strategy, loop: _Loop) -> None:
    """The nest a lowering keeps for when its buffers cannot be had runs only then: lowered
    again, it nests another copy of the lowered code under that rare branch (conv2d spent
    three rounds on it in a suite run), and any other strategy there changes nothing that is
    timed (attention's float_accumulator on it was a round spent for nothing)."""
    child, node = loop.node, loop.node.parent
    while node is not None:
        alternative = node.child_by_field_name("alternative")
        consequence = node.child_by_field_name("consequence")
        if (node.type == "if_statement" and alternative is not None and consequence is not None
                and alternative.start_byte <= child.start_byte < alternative.end_byte
                and _calls_a_gemm_helper(consequence)):  # fmt: skip
            _fail(strategy, loop, "is the fallback of a lowering already made: it runs only "
                                  "when that lowering's buffers cannot be had")  # fmt: skip
        child, node = node, node.parent


def _calls_a_gemm_helper(node: Node) -> bool:
    code = text(node)
    return any(f"{name}(" in code for name in (HELPER_NAME, MASKED_HELPER_NAME))


def _lowered(kernel: _Kernel, nest: _Window, names: dict[str, str], kc: int) -> str:
    """The patches (one row per window position, along the output's columns; zero where a
    guard skips), the weights packed one row per output row, one GEMM of the two, then the
    nest's epilogue over the sums. With a row of patches per output column instead (along the
    window), the fill's inner loop ran the window's last s = 3 positions: conv2d's timing case
    spent as long filling as multiplying (1.13 ms and 1.12 on one thread). Along the columns
    it copies a row of the input at a time, which the compiler vectorizes where the stride is
    one (`_unit_strided`): 0.4 ms. The GEMM packs the patches into its panels (a copy the
    other layout did not need, 0.3 ms), and the sums come out in the output's order: 1.8 ms
    a call instead of 2.2 on one thread, 1.0 instead of 1.4 on two. The three buffers are
    scratch, kept from one call to the next; without memory for them it runs the nest as it
    was."""
    indent, unit = (
        indentation(kernel.source, nest.rows.node.start_byte),
        _indent_unit(kernel, nest.rows),
    )
    depth, cols, patches, weights, sums, held = (names[role] for role in names)
    rows, row = _operand(_header(nest.rows).bound), _header(nest.rows).var
    column, window = _flat_index(nest.columns), _flat_index(nest.window)
    sums_in = f"{nest.accumulator} += {sums}[{row} * {cols} + {column}];"
    epilogue = [text(nest.declaration), sums_in, *(text(s) for s in nest.epilogue)]

    def scratch(offset: int, first: str, second: str) -> str:
        slot = FIRST_FREE_SCRATCH_SLOT + offset
        return f"{SCRATCH_NAME}({slot}, (size_t){first} * (size_t){second} + 1, &{held}[{offset}])"

    def done(offset: int, buffer: str) -> str:
        slot = FIRST_FREE_SCRATCH_SLOT + offset
        return f"{SCRATCH_NAME}_done({slot}, {buffer}, {held}[{offset}]);"

    def fill(ones: frozenset[str], base: str) -> list[str]:
        return _fill(kernel, nest, (patches, cols), ones, unit, base)

    inner = unit * 2
    lines = [
        "{",
        f"{unit}const int64_t {depth} = {_bounds_product(nest.window)};",
        f"{unit}const int64_t {cols} = {_bounds_product(nest.columns)};",
        f"{unit}int {held}[3];",
        f"{unit}float *{patches} = {scratch(0, depth, cols)};",
        f"{unit}float *{weights} = {scratch(1, rows, depth)};",
        f"{unit}float *{sums} = {scratch(2, rows, cols)};",
        f"{unit}if ({patches} != NULL && {weights} != NULL && {sums} != NULL) {{",
        *_unit_strided(_strides(kernel, nest), fill, unit, inner),
        *_nested(kernel, (nest.rows, *nest.window),
                 [f"{weights}[{row} * {depth} + {window}] = {text(nest.weight)};"], unit, inner),
        f"{inner}{HELPER_NAME}({rows}, {cols}, {depth}, {weights}, {depth}, 1, {patches}, "
        f"{cols}, 1, {sums}, {cols}, {kc});",
        *_nested(kernel, (nest.rows, *nest.columns),
                 [line for s in epilogue for line in s.split("\n")], unit, inner),
        f"{unit}}} else {{",
        *(inner + line for line in _relocated(kernel, nest.rows.node, text(nest.rows.node))),
        f"{unit}}}",
        f"{unit}{done(0, patches)}",
        f"{unit}{done(1, weights)}",
        f"{unit}{done(2, sums)}",
        "}",
    ]  # fmt: skip
    return ("\n" + indent).join(lines)


def _fill(
    kernel: _Kernel,
    nest: _Window,
    buffer: tuple[str, str],
    ones: frozenset[str],
    unit: str,
    base: str,
) -> list[str]:
    """The fill of the patches (`buffer`: their name and row length), window loops outside
    and the output's columns inside, each outermost window position's rows zeroed first.
    Every window loop's locals and guards move into the innermost loop, so a guard that fires
    skips one element (left zero) as it skipped that element's share of the window before.
    The names in `ones` read as 1."""
    patches, cols = buffer
    outer, *rest = nest.window
    slab = _bounds_product(tuple(rest)) if rest else "1"
    at = f"{_header(outer).var} * ({slab}) * {cols}"
    zero = f"memset({patches} + {at}, 0, sizeof(float) * (size_t)(({slab}) * {cols}));"
    preludes = [s for loop in nest.window for s in statements(_body(loop))[:-1]]
    store = (f"{patches}[({_flat_index(nest.window)}) * {cols} + {_flat_index(nest.columns)}] "
             f"= {_spelled(kernel, nest.patch, ones)};")  # fmt: skip
    body = [*(_spelled(kernel, s, ones) for s in preludes), store]
    return [
        f"{base}#pragma omp parallel for schedule(static)",
        f"{base}{_header_text(kernel, outer.node)} {{",
        f"{base}{unit}{zero}",
        *_nested(kernel, (*rest, *nest.columns), body, unit, base + unit),
        f"{base}}}",
    ]


def _unit_strided(
    strides: frozenset[str],
    fill: Callable[[frozenset[str], str], list[str]],
    unit: str,
    base: str,
) -> list[str]:
    """`fill(set(), base)`, and before it `fill(strides, ...)`, the copy for when every one
    of the strides is 1: the compiler vectorizes a loop over j that reads `x[j * stride + ...]`
    only when it knows the step, and conv2d's fill took 0.6 ms instead of 0.4 on one thread.
    Loop versioning, as compilers do it for strides they cannot see."""
    if not strides:
        return fill(frozenset(), base)
    test = " && ".join(f"{name} == 1" for name in sorted(strides))
    return [
        f"{base}if ({test}) {{",
        *fill(strides, base + unit),
        f"{base}}} else {{",
        *fill(frozenset(), base + unit),
        f"{base}}}",
    ]


def _strides(kernel: _Kernel, nest: _Window) -> frozenset[str]:
    """The signed integer variables that multiply a column variable in the patch's index or
    the window's locals and guards, and that the nest neither declares nor writes. (Written as
    1, an unsigned or floating stride would change the type of what it multiplies.)"""
    columns = {_header(loop).var for loop in nest.columns}
    top = nest.window[0].node
    window = {_header(loop).var for loop in nest.window}
    varying = columns | window | declared_names(top) | written_names(top)
    found: set[str] = set()
    for node in walk(top):
        left, right = field(node, "left"), field(node, "right")
        if node.type != "binary_expression" or operator(node) != "*" or not left or not right:
            continue
        sides = [strip_parens(left), strip_parens(right)]
        named = all(side.type == "identifier" for side in sides)
        if named and columns & {text(side) for side in sides}:
            found |= {text(side) for side in sides if _is_invariant_integer(kernel, side, varying)}
    return frozenset(found)


def _spelled(kernel: _Kernel, node: Node, ones: frozenset[str]) -> str:
    """The node's text with each of the identifiers in `ones` written as 1."""
    edits = [replacement(n, "1") for n in walk(node)
             if n.type == "identifier" and text(n) in ones]  # fmt: skip
    return _rewritten(kernel, node, edits)


def _body(loop: _Loop) -> Node:
    body = field(loop.node, "body")
    assert body is not None  # a window loop has a body: _window_loops walked it
    return body


def _header(loop: _Loop) -> _Header:
    assert loop.header is not None  # _windowed_nest checked every loop
    return loop.header


def _flat_index(loops: tuple[_Loop, ...]) -> str:
    """`(ch * r + p) * s + q`: the row-major index of the loops' variables."""
    index = _header(loops[0]).var
    for loop in loops[1:]:
        wrapped = f"({index})" if " " in index else index
        index = f"{wrapped} * {_operand(_header(loop).bound)} + {_header(loop).var}"
    return index


def _bounds_product(loops: tuple[_Loop, ...]) -> str:
    return " * ".join(_operand(_header(loop).bound) for loop in loops)


def _nested(
    kernel: _Kernel, loops: tuple[_Loop, ...], body: list[str], unit: str, base: str
) -> list[str]:
    """The loops' headers as written, nested, around `body` (lines relative to the inside)."""
    opening = [
        f"{base}{unit * d}{_header_text(kernel, loop.node)} {{" for d, loop in enumerate(loops)
    ]
    closing = [f"{base}{unit * d}}}" for d in reversed(range(len(loops)))]
    return [*opening, *(f"{base}{unit * len(loops)}{line}" for line in body), *closing]


def _relocated(kernel: _Kernel, node: Node, code: str) -> list[str]:
    """The lines of `code` (written where `node` is) with the node's own indentation removed."""
    own = indentation(kernel.source, node.start_byte)
    first, *rest = code.split("\n")
    return [first, *(line[len(own) :] if line.startswith(own) else line.lstrip() for line in rest)]


def _windowed_nest(kernel: _Kernel, strategy: Strategy, loop: _Loop) -> _Window:
    def not_applicable(why: str) -> NoReturn:
        wanted = ("for o { for i { acc = init; for ch { guards; for p { acc += X[..i..p..] * "
                  "W[..o..p..]; } } out[..o..] = acc; } }")  # fmt: skip
        _fail(strategy, loop, f"{why} (wanted `{wanted}`)")

    columns = _perfect_chain(kernel, loop)
    if not columns:
        not_applicable("it has no perfectly nested loop over the output's columns")
    leading = _leading_accumulator(columns[-1])
    if leading is None or not leading.after:
        not_applicable(f"the body of {columns[-1].info.id} is not one initialised scalar, "
                       "loops and a store")  # fmt: skip
    declaration, top, epilogue = leading.declaration, leading.loop, leading.after
    accumulator = leading.accumulator
    window, step = _window_loops(kernel, top, accumulator)
    if not window or step is None:
        not_applicable(
            f"the loops at line {line_of(top)} are not a window: bodies of locals, "
            f"`if (...) continue;` and the next loop, the last one `{accumulator} += ...;`"
        )
    nest = (loop, *columns, *window)
    for each in nest:
        header = _canonical(strategy, each)
        _no_pragmas(strategy, each)
        canonical = text(header.start) == "0" and header.comparison == "<" and header.step == 1
        if not canonical or header.declared_type is None:
            not_applicable("its loops do not all run `for (T v = 0; v < bound; ++v)`")
    _not_in_collapsed_nest(kernel, strategy, loop)
    changed = declared_names(loop.node) | written_names(loop.node)
    bounds = {name for each in nest for name in identifiers(_header(each).bound)}
    if bounds & changed:
        not_applicable(
            f"its bounds depend on {', '.join(sorted(bounds & changed))}, which change in it"
        )
    operator_, term = _accumulation_step(step, accumulator) or ("", top)
    if operator_ != "+=":
        not_applicable(f"{accumulator} does not only grow by +=")
    variables = (
        {_header(loop).var},
        {_header(each).var for each in columns},
        {_header(each).var for each in window},
    )
    sides = _window_sides(kernel, variables, top, step, accumulator, term)
    if isinstance(sides, str):
        not_applicable(sides)
    store = _final_store(epilogue, accumulator, _header(loop).var)
    if store is None:
        not_applicable("the statements after the window do not end in one store of the sum")
    output = strip_parens_and_casts(field(store[0], "argument") or store[0])
    if output.type != "identifier" or text(output) in identifiers(top):
        not_applicable(f"the output {text(output)} is also read in the window")
    return _Window(loop, columns, declaration, accumulator, window, step, *sides, epilogue)


def _perfect_chain(kernel: _Kernel, loop: _Loop) -> tuple[_Loop, ...]:
    chain = []
    current = kernel.by_id(loop.info.perfect_child)
    while current is not None:
        chain.append(current)
        current = kernel.by_id(current.info.perfect_child)
    return tuple(chain)


def _window_loops(
    kernel: _Kernel, top: Node, accumulator: str
) -> tuple[tuple[_Loop, ...], Node | None]:
    """The loops from `top` inward, each body locals and `continue` guards then the next loop,
    and the innermost's last statement when it is one accumulation of `accumulator`."""
    window: list[_Loop] = []
    node = top
    while True:
        window.append(kernel.at(node))
        body = field(node, "body")
        *prelude, last = statements(body) if body is not None else [node]
        if not all(_is_local_or_guard(s) for s in prelude):
            return tuple(window), None
        if last.type != "for_statement":
            found = _accumulation_step(last, accumulator)
            return tuple(window), last if found is not None else None
        node = last


def _is_local_or_guard(statement: Node) -> bool:
    if statement.type == "declaration":
        return True
    consequence = field(statement, "consequence")
    if statement.type != "if_statement" or consequence is None or field(statement, "alternative"):
        return False
    return [s.type for s in statements(consequence)] == ["continue_statement"]


def _window_sides(
    kernel: _Kernel,
    loops: tuple[set[str], set[str], set[str]],
    top: Node,
    step: Node,
    accumulator: str,
    term: Node,
) -> tuple[Node, Node] | str:
    """(patch, weight): the float element of `term` that reads no row variable, and the one
    that reads the row and window variables only; or why `term` has no such sides."""
    (row,), columns, window = loops
    product = strip_parens_and_casts(term)
    left, right = field(product, "left"), field(product, "right")
    if product.type != "binary_expression" or operator(product) != "*" or not left or not right:
        return f"`{text(term)}` is not a product"
    sides = [strip_parens_and_casts(side) for side in (left, right)]
    weights = [side for side in sides if row in identifiers(side)]
    if len(weights) != 1:
        return f"not exactly one side of `{text(term)}` reads {row}"
    weight = weights[0]
    patch = next(side for side in sides if not same(side, weight))
    locals_ = declared_names(top) - window
    if set(identifiers(weight)) & (columns | locals_ | {accumulator}):
        return f"`{text(weight)}` reads more than {row} and the window's variables"
    for side in (patch, weight):
        if not _float_element(kernel, side):
            return f"`{text(side)}` is not an element of a float array"
    for node in walk(top):
        if contains(step, node):
            continue
        if node.type == "identifier" and text(node) in (row, accumulator):
            return f"the window reads {text(node)} outside the sum (line {line_of(node)})"
        target = written_target(node)
        name = text(strip_parens(target)) if target is not None else None
        in_header = node.parent is not None and node.parent.type == "for_statement"
        if name is not None and not (name in window and in_header):
            return f"the window writes {name} (line {line_of(node)})"
    return patch, weight


def _float_element(kernel: _Kernel, node: Node) -> bool:
    array = field(node, "argument")
    if node.type != "subscript_expression" or array is None or array.type != "identifier":
        return False
    ctype = kernel.types.get(text(array))
    return ctype is not None and ctype.base == "float" and ctype.pointers == 1


# --- a row loop's dot products as one GEMM (attention's scores) ------------------------------

DOTS_SCRATCH_SLOT = FIRST_FREE_SCRATCH_SLOT + 3  # after im2col_gemm's three


@dataclass(frozen=True)
class _RowDots:
    """`for i { ...; for j { T acc = 0; for p acc += A[i,p] * B[p,j]; ...acc... } ... }`: the
    row loop (i), the loop over columns (j) and the sum's loop (p); `columns` is how many
    columns j the rows reach in all."""

    rows: _Loop
    sums: _Loop
    inner: _Loop
    declaration: Node  # `T acc = 0;`
    columns: str
    a: _Operand  # rows i, columns p
    b: _Operand  # rows p, columns j


def _dots_by_gemm(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    loop = kernel.loop(strategy)
    kc = _choice(strategy, "kc", GEMM_K_SLABS)
    nest = _row_dots(kernel, strategy, loop)
    dots, held = _scratch_names(kernel, strategy, loop, "dots", "held")
    _masked_helper_at_hand(kernel, strategy, nest.sums)
    return _with_helper(kernel, nest.rows.node, _dots_first(kernel, nest, dots, held, kc))


def _dots_first(kernel: _Kernel, nest: _RowDots, dots: str, held: str, kc: int) -> str:
    """The GEMM of every row's sums into `dots` (scratch, kept from one call to the next),
    then the row loop with each sum read from it instead of computed; without memory for the
    buffer, the row loop as it was."""
    helper, mask = _gemm_call(nest.sums, "KOPE_C_LOWER")
    indent, unit = (
        indentation(kernel.source, nest.rows.node.start_byte),
        _indent_unit(kernel, nest.rows),
    )
    rows, sums = _header(nest.rows), _header(nest.sums)
    m, n, k = _operand(rows.bound), nest.columns, _operand(_header(nest.inner).bound)
    initial = field(declarators(nest.declaration)[0], "value")
    assert initial is not None  # _row_dots found it
    reading = _rewritten(kernel, nest.rows.node, [
        replacement(initial, f"{dots}[{rows.var} * {n} + {sums.var}]"),
        Edit(nest.declaration.end_byte, nest.inner.node.end_byte, b""),
    ])  # fmt: skip
    a, b = nest.a, nest.b
    gemm = (f"{helper}({m}, {n}, {k}, {a.at()}, {a.row_stride}, {a.col_stride}, "
            f"{b.at()}, {b.row_stride}, {b.col_stride}, {dots}, {n}, {kc}{mask});")  # fmt: skip
    count = f"(size_t){m} * (size_t){n} + 1"
    lines = [
        "{",
        f"{unit}int {held};",
        f"{unit}float *{dots} = {SCRATCH_NAME}({DOTS_SCRATCH_SLOT}, {count}, &{held});",
        f"{unit}if ({dots} != NULL) {{",
        f"{unit * 2}{gemm}",
        *(unit * 2 + line for line in _relocated(kernel, nest.rows.node, reading)),
        f"{unit}}} else {{",
        *(unit * 2 + line for line in _relocated(kernel, nest.rows.node, text(nest.rows.node))),
        f"{unit}}}",
        f"{unit}{SCRATCH_NAME}_done({DOTS_SCRATCH_SLOT}, {dots}, {held});",
        "}",
    ]
    return ("\n" + indent).join(lines)


def _row_dots(kernel: _Kernel, strategy: Strategy, loop: _Loop) -> _RowDots:
    def not_applicable(why: str) -> NoReturn:
        _fail(strategy, loop, f"{why} (wanted `for i {{ ...; for j {{ acc = 0; for p acc += "
                              "A[i,p] * B[p,j]; ...acc... } ... }`)")  # fmt: skip

    rows = kernel.by_id(loop.info.parent)
    if rows is None:
        not_applicable("it is not inside a loop over rows")
    if rows.info.perfect_child == loop.info.id:
        not_applicable(f"it is all of {rows.info.id}'s body: packed_gemm lowers such a nest")
    if loop.node.parent != field(rows.node, "body"):
        # under a condition, the rows and columns it reads may not all exist
        not_applicable(f"it is not a statement of {rows.info.id}'s body itself")
    leading = _leading_accumulator(loop)
    if leading is None or not _is_zero(leading.initial):
        not_applicable("its body does not start with one scalar set to 0 and a loop")
    accumulator, inner = leading.accumulator, kernel.at(leading.loop)
    step = _single_accumulation(inner, accumulator)
    if step is None or step[0] != "+=":
        not_applicable(f"the body of {inner.info.id} is not one `{accumulator} += ...;`")
    if any(accumulator in written_names(statement) for statement in leading.after):
        not_applicable(f"{accumulator} changes after its sum")
    headers, columns = _row_nest(kernel, strategy, (rows, loop, inner), not_applicable)
    i, j, p = (header.var for header in headers)
    operands = _product_operands(kernel, step[1], i, j, p)
    if operands is None:
        not_applicable(f"`{text(step[1])}` is not a product of float matrices A[i,p], B[p,j]")
    a, b = operands
    read = {a.array, b.array, *a.reads, *b.reads, *identifiers(headers[0].bound),
            *identifiers(headers[2].bound)}  # fmt: skip
    if headers[1].comparison == "<":
        read |= set(identifiers(headers[1].bound))
    changed = declared_names(rows.node) | written_names(rows.node)
    if read & changed:
        not_applicable(f"{', '.join(sorted(read & changed))} change inside {rows.info.id}")
    return _RowDots(rows, loop, inner, leading.declaration, columns, a, b)


def _row_nest(kernel: _Kernel, strategy: Strategy, nest: tuple[_Loop, _Loop, _Loop],
              not_applicable: Callable[[str], NoReturn]) -> tuple[list[_Header], str]:  # fmt: skip
    """The headers of a row loop, a loop in its body over columns and that loop's inner loop,
    and how many columns the rows reach in all, when the three are plain counted loops without
    pragmas, outside parallel regions."""
    rows = nest[0]
    headers = [_canonical(strategy, each) for each in nest]
    for each in nest:
        _no_pragmas(strategy, each)
    _outside_parallel_regions(kernel, strategy, rows)
    _not_in_collapsed_nest(kernel, strategy, rows)
    if any(text(h.start) != "0" or h.step != 1 for h in headers) or "<=" in (
        headers[0].comparison, headers[2].comparison,
    ):  # fmt: skip
        not_applicable("its loops do not all run `for (v = 0; v < bound; ++v)`")
    columns = _columns_reached(headers[0], headers[1])
    if columns is None:
        not_applicable(f"{headers[1].var} runs neither to a bound of its own nor to "
                       f"{headers[0].var} inclusive")  # fmt: skip
    return headers, columns


def _columns_reached(rows: _Header, columns: _Header) -> str | None:
    """How many columns j the rows reach in all: the bound of `j < n`, or the rows' own bound
    for `j <= i` (a causal mask: row i reads columns 0..i)."""
    if columns.comparison == "<":
        return _operand(columns.bound)
    if text(strip_parens(columns.bound)) == rows.var:
        return _operand(rows.bound)
    return None


# --- a row loop's weighted sums of a matrix's rows as one GEMM (attention's P.V) ------------

WEIGHTED_SCRATCH_SLOT = DOTS_SCRATCH_SLOT + 1  # two slots: the weights, then the sums


@dataclass(frozen=True)
class _RowWeightedSums:
    """`for i { before; for e acc[e] = 0; for j { for e acc[e] += w[j] * V[j,e]; } after }`:
    the row loop (i), the loop over V's rows (j) and its columns (e), the weights `w[j]` and
    the matrix V; `depth` is how many rows of V the rows reach in all (the GEMM's k), `width`
    the bound of e. `carried` are the scalars `before` declares that `after` reads, with their
    types: a row's values are kept for the second pass."""

    rows: _Loop
    zeroing: Node
    sums: _Loop
    accumulator: str
    weights: Node
    matrix: _Operand
    depth: str
    width: str
    after: list[Node]
    carried: list[tuple[str, str]]


def _weighted_sums_by_gemm(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    loop = kernel.loop(strategy)
    kc = _choice(strategy, "kc", GEMM_K_SLABS)
    nest = _row_weighted_sums(kernel, strategy, loop)
    roles = ("weights", "sums", "held", *(f"{name}_rows" for _, name in nest.carried))
    names = _scratch_names(kernel, strategy, loop, *roles)
    _masked_helper_at_hand(kernel, strategy, nest.sums)
    return _with_helper(kernel, nest.rows.node, _weighted_sums_later(kernel, nest, names, kc))


def _weighted_sums_later(kernel: _Kernel, nest: _RowWeightedSums, names: list[str],
                         kc: int) -> str:  # fmt: skip
    """The row loop in two passes around one GEMM: the first runs everything before the sums
    and copies each row's weights (and the scalars the rest reads) into buffers, the GEMM
    computes every row's sums, the second runs what followed the sums, reading them from the
    GEMM's result. The weights and sums are scratch, kept from one call to the next; without
    memory for them it runs the row loop as it was."""
    indent, unit = (
        indentation(kernel.source, nest.rows.node.start_byte),
        _indent_unit(kernel, nest.rows),
    )
    weights, sums, held, *kept = names
    helper, mask = _gemm_call(nest.sums, "KOPE_A_LOWER")
    rows, inner = _header(nest.rows), unit * 2
    m, n, width = _operand(rows.bound), nest.depth, nest.width
    matrix = nest.matrix
    buffers = [weights, sums, *kept]
    lines = [
        "{",
        f"{unit}int {held}[2];",
        f"{unit}float *{weights} = {SCRATCH_NAME}({WEIGHTED_SCRATCH_SLOT}, (size_t){m} * "
        f"(size_t){n} + 1, &{held}[0]);",
        f"{unit}float *{sums} = {SCRATCH_NAME}({WEIGHTED_SCRATCH_SLOT + 1}, (size_t){m} * "
        f"(size_t){width} + 1, &{held}[1]);",
        *(f"{unit}{ctype} *{keep} = malloc(sizeof({ctype}) * ((size_t){m} + 1));"
          for (ctype, _), keep in zip(nest.carried, kept, strict=True)),
        f"{unit}if ({' && '.join(f'{b} != NULL' for b in buffers)}) {{",
        *(inner + line for line in _weights_pass(kernel, nest, weights, kept)),
        f"{inner}{helper}({m}, {width}, {n}, {weights}, {n}, 1, {matrix.at()}, "
        f"{matrix.row_stride}, {matrix.col_stride}, {sums}, {width}, {kc}{mask});",
        *(inner + line for line in _after_pass(kernel, nest, sums, kept, unit)),
        f"{unit}}} else {{",
        *(inner + line for line in _relocated(kernel, nest.rows.node, text(nest.rows.node))),
        f"{unit}}}",
        *(f"{unit}free({keep});" for keep in kept),
        f"{unit}{SCRATCH_NAME}_done({WEIGHTED_SCRATCH_SLOT}, {weights}, {held}[0]);",
        f"{unit}{SCRATCH_NAME}_done({WEIGHTED_SCRATCH_SLOT + 1}, {sums}, {held}[1]);",
        "}",
    ]  # fmt: skip
    return ("\n" + indent).join(lines)


def _weights_pass(kernel: _Kernel, nest: _RowWeightedSums, weights: str,
                  kept: list[str]) -> list[str]:  # fmt: skip
    """The row loop up to its sums, then the row's weights into row i of `weights` (zero past
    the last column a causal row reaches) and the carried scalars into theirs."""
    i, j = _header(nest.rows).var, _header(nest.sums).var
    row = f"{weights}[{i} * {nest.depth} + {j}]"
    copy = [f"{_header_text(kernel, nest.sums.node)} {row} = (float){text(nest.weights)};"]
    if _header(nest.sums).comparison == "<=":
        copy.append(f"memset({weights} + {i} * {nest.depth} + {i} + 1, 0, "
                    f"sizeof(float) * (size_t)({nest.depth} - {i} - 1));")  # fmt: skip
    copy += [f"{keep}[{i}] = {name};" for (_, name), keep in zip(nest.carried, kept, strict=True)]
    last = nest.after[-1] if nest.after else nest.sums.node
    zero_indent = indentation(kernel.source, nest.zeroing.start_byte)
    code = _rewritten(kernel, nest.rows.node, [
        Edit(nest.zeroing.start_byte, last.end_byte, ("\n" + zero_indent).join(copy).encode()),
    ])  # fmt: skip
    return _relocated(kernel, nest.rows.node, code)


def _after_pass(kernel: _Kernel, nest: _RowWeightedSums, sums: str, kept: list[str],
                unit: str) -> list[str]:  # fmt: skip
    """The row loop again over what followed the sums, each `acc[x]` read from row i of
    `sums`, each carried scalar declared again from its row's value."""
    i = _header(nest.rows).var
    restored = [f"{unit}{ctype} {name} = {keep}[{i}];"
                for (ctype, name), keep in zip(nest.carried, kept, strict=True)]  # fmt: skip
    body = []
    for statement in nest.after:
        reads = [node for node in walk(statement) if node.type == "subscript_expression"
                 and text(field(node, "argument") or node) == nest.accumulator]  # fmt: skip
        code = _rewritten(kernel, statement, [
            replacement(node, f"{sums}[{i} * {nest.width} + {_operand(_index(node))}]")
            for node in reads
        ])  # fmt: skip
        body += [unit + line for line in _relocated(kernel, statement, code)]
    return [f"{_header_text(kernel, nest.rows.node)} {{", *restored, *body, "}"]


def _index(subscript: Node) -> Node:
    index = field(subscript, "index")
    assert index is not None  # a subscript expression has one
    return index


def _row_weighted_sums(kernel: _Kernel, strategy: Strategy, loop: _Loop) -> _RowWeightedSums:
    def not_applicable(why: str) -> NoReturn:
        _fail(strategy, loop, f"{why} (wanted `for i {{ ...; for e acc[e] = 0; for j {{ for e "
                              "acc[e] += w[j] * V[j,e]; }} ... }}`)")  # fmt: skip

    rows = kernel.by_id(loop.info.parent)
    body = field(rows.node, "body") if rows is not None else None
    if rows is None or body is None or loop.node.parent != body:
        not_applicable("it is not a statement of a row loop's body")
    parts = statements(body)
    at = next(n for n, part in enumerate(parts) if same(part, loop.node))
    columns = kernel.by_id(loop.info.perfect_child)
    if columns is None or columns.info.children or at == 0:
        not_applicable("its body is not one innermost loop, after a loop that zeroes the sums")
    headers, depth = _row_nest(kernel, strategy, (rows, loop, columns), not_applicable)
    i, j, e = (header.var for header in headers)
    step = _weighted_step(kernel, columns, i, j, e)
    if step is None:
        not_applicable(f"the body of {columns.info.id} is not one `acc[{e}] += w[{j}] * "
                       f"V[{j},{e}];` with V a float matrix")  # fmt: skip
    accumulator, weights, matrix = step
    width = _operand(headers[2].bound)
    if not _zeroes(kernel, parts[at - 1], accumulator, text(headers[2].bound)):
        not_applicable(f"the statement before it does not set {accumulator}[0..{width}) to 0")
    before, after = parts[: at - 1], parts[at + 1 :]
    weight_array = _subscripted_by(weights, j)
    assert weight_array is not None  # _weighted_step found it
    carried = _row_fission(strategy, loop, rows, before, after, accumulator, weight_array)
    read = {matrix.array, *matrix.reads, *identifiers(headers[0].bound),
            *identifiers(headers[2].bound)}  # fmt: skip
    if headers[1].comparison == "<":
        read |= set(identifiers(headers[1].bound))
    changed = declared_names(rows.node) | written_names(rows.node) | _written_arrays(rows.node)
    if read & changed:
        not_applicable(f"{', '.join(sorted(read & changed))} change inside {rows.info.id}")
    return _RowWeightedSums(rows, parts[at - 1], loop, accumulator, weights, matrix, depth,
                            width, after, carried)  # fmt: skip


def _weighted_step(kernel: _Kernel, columns: _Loop, i: str, j: str,
                   e: str) -> tuple[str, Node, _Operand] | None:  # fmt: skip
    """(acc, w[j], V) when the loop's body is `acc[e] += w[j] * V[j,e];`."""
    body = field(columns.node, "body")
    parts = statements(body) if body is not None else []
    if len(parts) != 1 or parts[0].type != "expression_statement":
        return None
    step = parts[0].named_children[0] if parts[0].named_children else None
    left = field(step, "left") if step is not None else None
    product = strip_parens_and_casts(field(step, "right") or step) if step is not None else None
    if step is None or step.type != "assignment_expression" or operator(step) != "+=":
        return None
    accumulator = _subscripted_by(left, e) if left is not None else None
    factors = (field(product, "left"), field(product, "right")) if product else (None, None)
    if accumulator is None or product is None or operator(product) != "*" or None in factors:
        return None
    for first, second in (factors, factors[::-1]):
        assert first is not None and second is not None
        weights = strip_parens_and_casts(first)
        matrix = _matrix_operand(kernel, strip_parens_and_casts(second), j, e, i)
        weight_array = _subscripted_by(weights, j)
        if matrix is not None and weight_array not in (None, accumulator):
            return accumulator, weights, matrix
    return None


def _subscripted_by(node: Node, var: str) -> str | None:
    """`x` when the node is `x[var]`."""
    array, index = field(node, "argument"), field(node, "index")
    if node.type != "subscript_expression" or array is None or index is None:
        return None
    if array.type != "identifier" or text(strip_parens(index)) != var:
        return None
    return text(array)


def _zeroes(kernel: _Kernel, statement: Node, accumulator: str, width: str) -> bool:
    """Whether the statement is `for (e = 0; e < width; ++e) acc[e] = 0;`."""
    if statement.type != "for_statement":
        return False
    header = kernel.at(statement).header
    body = field(statement, "body")
    parts = statements(body) if body is not None else []
    if header is None or text(header.start) != "0" or header.comparison != "<":
        return False
    if header.step != 1 or text(header.bound) != width or len(parts) != 1:
        return False
    store = parts[0].named_children[0] if parts[0].type == "expression_statement" else None
    if store is None or store.type != "assignment_expression" or operator(store) != "=":
        return False
    left, right = field(store, "left"), field(store, "right")
    return (left is not None and right is not None and _is_zero(right)
            and _subscripted_by(left, header.var) == accumulator)  # fmt: skip


def _row_fission(
    strategy: Strategy, loop: _Loop, rows: _Loop, before: list[Node], after: list[Node],
    accumulator: str, weights: str,
) -> list[tuple[str, str]]:  # fmt: skip
    """Whether the row loop can run as two passes (everything before the sums for every row,
    then everything after them), and the scalars `before` declares that `after` reads: their
    values are kept per row. TransformError when it cannot."""
    body = field(rows.node, "body")
    assert body is not None  # _row_weighted_sums read it
    leaving = escapes(body, continues=True)
    if leaving is not None:
        _fail(strategy, loop, f"{rows.info.id} leaves a row early (line {line_of(leaving)})")
    first_reads = {name for s in before for name in identifiers(s)}
    first_writes = {n for s in before for n in written_names(s) | _written_arrays(s)}
    own = {name for s in after for name in declared_names(s)}
    later_reads = {name for s in after for name in identifiers(s)} - own
    later_writes = {n for s in after for n in written_names(s) | _written_arrays(s)} - own
    if accumulator in first_reads or {weights, accumulator} & later_writes:
        _fail(strategy, loop, f"{accumulator} is used before its sums are zeroed, or changed "
                              "after them")  # fmt: skip
    if any(_read_whole(statement, accumulator) for statement in after):
        _fail(strategy, loop, f"what follows the sums reads {accumulator} other than as "
                              f"{accumulator}[x]")  # fmt: skip
    if weights in later_reads or later_writes & first_reads:
        _fail(strategy, loop, "what follows the sums reads the weights or writes what comes "
                              "before them reads")  # fmt: skip
    carried = _row_scalars(before, later_reads)
    declared = {name for s in before for name in declared_names(s)}
    unkept = ((first_writes | declared) & later_reads) - {name for _, name in carried}
    if unkept:
        _fail(strategy, loop, f"what follows the sums reads {', '.join(sorted(unkept))}, which "
                              "the row sets before them")  # fmt: skip
    return carried


def _read_whole(statement: Node, array: str) -> bool:
    """Whether the statement names `array` other than as the array of a subscript."""
    for node in walk(statement):
        if node.type == "identifier" and text(node) == array:
            parent = node.parent
            if parent is None or parent.type != "subscript_expression":
                return True
            if not same(field(parent, "argument") or parent, node):
                return True
    return False


def _row_scalars(before: list[Node], read: set[str]) -> list[tuple[str, str]]:
    """(type, name) of each scalar declared at the top of the row's body that `read` names."""
    found = []
    for statement in before:
        type_node = field(statement, "type") if statement.type == "declaration" else None
        if type_node is None:
            continue
        for declarator in declarators(statement):
            name = declarator_name(declarator)
            if name in read and is_scalar_declarator(declarator):
                found.append((text(type_node), name))
    return found


def _written_arrays(node: Node) -> set[str]:
    """Arrays the subtree writes an element of: `a[i] = ...`, `a[i] += ...`, `++a[i]`."""
    names = set()
    for each in walk(node):
        target = written_target(each)
        while target is not None and strip_parens(target).type == "subscript_expression":
            target = field(strip_parens(target), "argument")
        if target is not None and strip_parens(target).type == "identifier":
            names.add(text(strip_parens(target)))
    return names


# --- temporaries kept between calls ----------------------------------------------------------

KEPT_NAME = "kope_kept"
KEPT_SLOTS = 32
ALLOCATORS = ("malloc", "kope_alloc")
KEPT_SOURCE = f"""#include <stdlib.h>
/* {KEPT_NAME}: a buffer of at least `bytes` for allocation site `slot`, kept from one call to
 * the next (grown, never shrunk or freed): a temporary of megabytes from malloc is fresh
 * pages on every call, each faulted in. While one caller holds the slot, another (a thread)
 * gets its own from malloc; *held says which it was, for {KEPT_NAME}_done. */
static void *{KEPT_NAME}_buffers[{KEPT_SLOTS}];
static size_t {KEPT_NAME}_sizes[{KEPT_SLOTS}];
static int {KEPT_NAME}_taken[{KEPT_SLOTS}];

static void *{KEPT_NAME}(int slot, size_t bytes, int *held) {{
    if (bytes == 0) bytes = 1;
    *held = !__atomic_exchange_n(&{KEPT_NAME}_taken[slot], 1, __ATOMIC_ACQUIRE);
    if (!*held) return malloc(bytes);
    if ({KEPT_NAME}_sizes[slot] < bytes) {{
        free({KEPT_NAME}_buffers[slot]);
        {KEPT_NAME}_buffers[slot] = malloc(bytes);
        {KEPT_NAME}_sizes[slot] = {KEPT_NAME}_buffers[slot] != NULL ? bytes : 0;
    }}
    return {KEPT_NAME}_buffers[slot];
}}

static void {KEPT_NAME}_done(int slot, void *buffer, int held) {{
    if (held) {{
        __atomic_store_n(&{KEPT_NAME}_taken[slot], 0, __ATOMIC_RELEASE);
    }} else {{
        free(buffer);
    }}
}}
"""


@dataclass(frozen=True)
class _Allocation:
    call: Node  # `malloc(n)`
    pointer: str  # what it is assigned to
    frees: tuple[Node, ...]  # the `free(pointer)` calls
    function: Node


def _keep_buffers(kernel: _Kernel, strategy: Strategy) -> list[Edit]:
    if KEPT_NAME in identifiers(kernel.tree.root_node):
        _fail(strategy, None, "the kernel keeps its buffers already")
    sites = [site for function in kernel.functions for site in _freed_allocations(function)]
    if not sites:
        _fail(strategy, None, "no `p = malloc(n)` (or kope_alloc) whose p the kernel frees")
    if len(sites) > KEPT_SLOTS:
        _fail(strategy, None, f"{len(sites)} allocations, more than {KEPT_SLOTS} slots")
    held = f"{KEPT_NAME}_held"
    edits = []
    for slot, site in enumerate(sites):
        size = text(field(site.call, "arguments").named_children[0])  # type: ignore[union-attr]
        edits.append(replacement(site.call, f"{KEPT_NAME}({slot}, {size}, &{held}[{slot}])"))
        edits += [replacement(call, f"{KEPT_NAME}_done({slot}, {site.pointer}, {held}[{slot}])")
                  for call in site.frees]  # fmt: skip
    for function in {id(s.function): s.function for s in sites}.values():
        body = field(function, "body")
        assert body is not None  # _analyse found its loops in it
        edits.append(insertion(body.start_byte + 1, f"\n    int {held}[{len(sites)}] = {{0}};"))
    at = line_start(kernel.source, kernel.function.start_byte)
    return [*edits, insertion(at, KEPT_SOURCE + "\n")]


def _freed_allocations(function: Node) -> list[_Allocation]:
    """Each allocation assigned straight to a pointer the function frees, and only allocated
    there: `p = (T *)malloc(n);` or `T *p = malloc(n);`, then `free(p)`."""
    calls = {name: [c for c in walk(function) if _called(c) == name] for name in ("free",)}
    allocations = [c for c in walk(function) if _called(c) in ALLOCATORS]
    pointers = [_assigned_to(call) for call in allocations]
    found = []
    for call, pointer in zip(allocations, pointers, strict=True):
        if pointer is None or pointers.count(pointer) != 1:
            continue
        frees = tuple(c for c in calls["free"] if _only_argument(c) == pointer)
        if frees:
            found.append(_Allocation(call, pointer, frees, function))
    return found


def _called(node: Node) -> str | None:
    callee = field(node, "function") if node.type == "call_expression" else None
    return text(callee) if callee is not None and callee.type == "identifier" else None


def _only_argument(call: Node) -> str | None:
    arguments = field(call, "arguments")
    named = arguments.named_children if arguments is not None else []
    return text(named[0]) if len(named) == 1 and named[0].type == "identifier" else None


def _assigned_to(call: Node) -> str | None:
    """`p` in `p = (T *)call;` or `T *p = call;` (casts and parentheses between)."""
    node = call
    while node.parent is not None and node.parent.type in (
        "cast_expression",
        "parenthesized_expression",
    ):
        node = node.parent  # fmt: skip
    parent = node.parent
    if parent is None:
        return None
    if parent.type == "assignment_expression" and same(field(parent, "right"), node):
        left = field(parent, "left")
        return text(left) if left is not None and left.type == "identifier" else None
    if parent.type == "init_declarator" and same(field(parent, "value"), node):
        return declarator_name(parent)
    return None


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
