"""The shape a strategy needs, checked: each check raises TransformError saying which loop
falls short and how."""

from __future__ import annotations

from typing import Any, NoReturn

from tree_sitter import Node

from apps.agents.offline.cparse import (
    TransformError,
    escapes,
    field,
    identifiers,
    line_of,
    pragma_text,
)
from apps.agents.offline.transforms.analysis import _Header, _Kernel, _Loop
from apps.agents.offline.transforms.catalogue import Strategy


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
