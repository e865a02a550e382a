"""A row loop's dot products (attention's scores: `dots_by_gemm`) and its weighted sums of a
matrix's rows (attention's probabilities times values: `weighted_sums_by_gemm`), each as one
GEMM over all the rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from tree_sitter import Node

from apps.agents.offline.cparse import (
    Edit,
    declarator_name,
    declarators,
    declared_names,
    escapes,
    field,
    identifiers,
    indentation,
    is_scalar_declarator,
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
from apps.agents.offline.packed_gemm import FIRST_FREE_SCRATCH_SLOT, SCRATCH_NAME
from apps.agents.offline.transforms.accumulation import _leading_accumulator, _single_accumulation
from apps.agents.offline.transforms.analysis import _Header, _Kernel, _Loop
from apps.agents.offline.transforms.catalogue import GEMM_K_SLABS, Strategy
from apps.agents.offline.transforms.editing import (
    _header_text,
    _indent_unit,
    _operand,
    _relocated,
    _rewritten,
)
from apps.agents.offline.transforms.gemm import (
    _gemm_call,
    _header,
    _is_zero,
    _masked_helper_at_hand,
    _matrix_operand,
    _Operand,
    _product_operands,
    _scratch_names,
    _with_helper,
)
from apps.agents.offline.transforms.preconditions import (
    _canonical,
    _choice,
    _fail,
    _no_pragmas,
    _not_in_collapsed_nest,
    _outside_parallel_regions,
)

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
