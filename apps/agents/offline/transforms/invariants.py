"""`hoist_invariant`: loop-invariant index products computed once before the loop, and
divisions by a loop-invariant value turned into multiplications by its reciprocal."""

from __future__ import annotations

from tree_sitter import Node

from apps.agents.offline.cparse import (
    Edit,
    contains,
    declared_names,
    expression_type,
    field,
    identifiers,
    operator,
    replacement,
    squashed,
    strip_parens,
    text,
    walk,
    written_names,
)
from apps.agents.offline.transforms.analysis import _Kernel
from apps.agents.offline.transforms.catalogue import Strategy
from apps.agents.offline.transforms.editing import _fresh_name, _operand, _prefix
from apps.agents.offline.transforms.preconditions import _fail, _not_in_collapsed_nest


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
