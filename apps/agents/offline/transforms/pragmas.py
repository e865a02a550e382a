"""The loop pragmas: OpenMP's `parallel for` (`omp_parallel_for`; for a loop with scratch
buffers, a parallel region that gives each thread its own, `omp_parallel_private`), `omp simd`
(`omp_simd`) and gcc's `unroll`."""

from __future__ import annotations

from tree_sitter import Node

from apps.agents.offline.cparse import (
    Edit,
    declarator_name,
    declarators,
    field,
    identifiers,
    indentation,
    insertion,
    replacement,
    same,
    statements,
    strip_parens_and_casts,
    text,
    walk,
)
from apps.agents.offline.transforms.analysis import _OMP_REDUCTION, _Kernel, _Loop
from apps.agents.offline.transforms.catalogue import COLLAPSES, SCHEDULES, UNROLL_FACTORS, Strategy
from apps.agents.offline.transforms.editing import (
    _fresh_name,
    _indent_unit,
    _prefix,
    _relocated,
    _rewritten,
)
from apps.agents.offline.transforms.preconditions import (
    _canonical,
    _choice,
    _fail,
    _innermost,
    _no_escape,
    _no_pragmas,
    _no_simd_ancestor,
    _not_in_collapsed_nest,
    _outside_parallel_regions,
    _perfect_child_loop,
    _rectangular,
)


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
