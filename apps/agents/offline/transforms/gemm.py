"""A matrix-product nest as one call to the packed GEMM (`packed_gemm`), and what every GEMM
lowering shares: the helper put before the kernel, names for scratch buffers, the masked GEMM
under a causal mask, float matrices read from subscripts, and the fallback nest a lowering
keeps, which no strategy touches again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from tree_sitter import Node

from apps.agents.offline.cparse import (
    Edit,
    declarators,
    declared_names,
    field,
    identifiers,
    indentation,
    insertion,
    line_start,
    operator,
    reindented,
    replacement,
    statements,
    strip_parens,
    strip_parens_and_casts,
    text,
    written_names,
)
from apps.agents.offline.packed_gemm import (
    HELPER_NAME,
    HELPER_SOURCE,
    MASKED_HELPER_NAME,
    SCRATCH_NAME,
)
from apps.agents.offline.transforms.accumulation import _Accumulation, _accumulation
from apps.agents.offline.transforms.analysis import _Header, _Kernel, _Loop
from apps.agents.offline.transforms.catalogue import GEMM_K_SLABS, Strategy
from apps.agents.offline.transforms.editing import (
    _fresh_name,
    _header_text,
    _indent_unit,
    _operand,
    _rewritten,
)
from apps.agents.offline.transforms.preconditions import (
    _canonical,
    _choice,
    _fail,
    _no_pragmas,
    _not_in_collapsed_nest,
    _perfect_child_loop,
    _rectangular,
)


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


def _header(loop: _Loop) -> _Header:
    assert loop.header is not None  # _windowed_nest checked every loop
    return loop.header


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
