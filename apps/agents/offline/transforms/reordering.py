"""A perfect nest reordered: `interchange` and `tile`, and what either would do to the order in
which the nest walks memory (the policy asks before it tries them)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tree_sitter import Node

from apps.agents.offline.cparse import (
    Edit,
    TransformError,
    field,
    identifiers,
    indentation,
    operator,
    reindented,
    replacement,
    strip_parens,
    text,
    walk,
)
from apps.agents.offline.transforms.analysis import _analyse, _Header, _Kernel, _Loop
from apps.agents.offline.transforms.catalogue import TILE_SIZES, Strategy
from apps.agents.offline.transforms.editing import (
    _fresh_name,
    _header_parens,
    _indent_unit,
    _operand,
)
from apps.agents.offline.transforms.preconditions import (
    _canonical,
    _choice,
    _fail,
    _header_parts,
    _perfect_child_loop,
    _rectangular,
)


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
