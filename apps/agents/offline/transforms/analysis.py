"""The kernel as the strategies see it, from its syntax tree: its functions and `for` loops,
with their canonical headers, pragmas, reductions and whether they carry a dependence
(`_analyse`, once per source)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from tree_sitter import Node, Tree

from apps.agents.offline.cparse import (
    CType,
    TransformError,
    called_functions,
    contains,
    declarator_name,
    declarators,
    declared_names,
    declared_types,
    defined_functions,
    field,
    identifiers,
    is_pragma,
    is_scalar_declarator,
    kernel_function,
    line_of,
    operator,
    pragma_text,
    require_parsable,
    same,
    squashed,
    statements,
    strip_parens,
    text,
    visible_declaration,
    walk,
    written_names,
    written_target,
)
from apps.agents.offline.transforms.catalogue import LoopInfo, Strategy

KERNEL_NAME = "kope_kernel"
VARIANT_NAME = re.compile(r"kope_variant_\d+")  # apps/operators/lowering/emit.py names them


# OpenMP's reduction operator for each recognised accumulation (a `-=` sum combines with +).
_OMP_REDUCTION = {"+": "+", "-": "+", "*": "*", "max": "max", "min": "min"}


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


def _loop_calls(kernel: _Kernel) -> dict[str, frozenset[str]]:
    return {loop.info.id: frozenset(called_functions(loop.node)) for loop in kernel.loops}
