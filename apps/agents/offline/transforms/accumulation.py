"""A loop's accumulators: the sum kept in the output (`accumulate_in_output`), double
accumulators made float (`float_accumulator`), and the accumulation shapes the GEMM lowerings
recognise too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from tree_sitter import Node

from apps.agents.offline.cparse import (
    Edit,
    contains,
    declarators,
    declared_names,
    field,
    identifiers,
    indentation,
    operator,
    replacement,
    squashed,
    statements,
    strip_parens,
    strip_parens_and_casts,
    text,
    visible_declaration,
    walk,
    written_names,
)
from apps.agents.offline.transforms.analysis import _binary_reduction, _Kernel, _Loop
from apps.agents.offline.transforms.catalogue import Strategy
from apps.agents.offline.transforms.editing import _header_text, _indent_unit, _rewritten
from apps.agents.offline.transforms.preconditions import (
    _canonical,
    _fail,
    _header_parts,
    _no_pragmas,
    _not_in_collapsed_nest,
)


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
