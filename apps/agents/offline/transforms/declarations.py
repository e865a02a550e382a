"""What the kernel declares: its data pointers `restrict` (`restrict_pointers`), and the math
functions its loops call declared simd for libmvec (`vector_math`)."""

from __future__ import annotations

import itertools

from tree_sitter import Node

from apps.agents.offline.cparse import (
    Edit,
    declarator_name,
    declarators,
    field,
    insertion,
    is_pragma,
    parameter_names,
    pragma_text,
    squashed,
    strip_parens,
    strip_parens_and_casts,
    text,
    walk,
)
from apps.agents.offline.transforms.analysis import _Kernel, _loop_calls
from apps.agents.offline.transforms.catalogue import Strategy
from apps.agents.offline.transforms.preconditions import _fail


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
