"""A windowed reduction (a convolution) as one GEMM: `im2col_gemm`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from tree_sitter import Node

from apps.agents.offline.cparse import (
    Edit,
    contains,
    declared_names,
    field,
    identifiers,
    indentation,
    line_of,
    operator,
    replacement,
    same,
    statements,
    strip_parens,
    strip_parens_and_casts,
    text,
    walk,
    written_names,
    written_target,
)
from apps.agents.offline.packed_gemm import FIRST_FREE_SCRATCH_SLOT, HELPER_NAME, SCRATCH_NAME
from apps.agents.offline.transforms.accumulation import (
    _accumulation_step,
    _final_store,
    _leading_accumulator,
)
from apps.agents.offline.transforms.analysis import _Kernel, _Loop
from apps.agents.offline.transforms.catalogue import GEMM_K_SLABS, Strategy
from apps.agents.offline.transforms.editing import (
    _header_text,
    _indent_unit,
    _operand,
    _relocated,
    _rewritten,
)
from apps.agents.offline.transforms.gemm import _header, _scratch_names, _with_helper
from apps.agents.offline.transforms.invariants import _is_invariant_integer
from apps.agents.offline.transforms.preconditions import (
    _canonical,
    _choice,
    _fail,
    _no_pragmas,
    _not_in_collapsed_nest,
)


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
