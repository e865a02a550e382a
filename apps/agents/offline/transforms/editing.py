"""Edits by byte range and the text they put in: lines before a loop, a loop's header and
indentation, a node's text with edits applied or moved elsewhere, fresh names, operands."""

from __future__ import annotations

from tree_sitter import Node

from apps.agents.offline.cparse import (
    Edit,
    apply_edits,
    field,
    indentation,
    insertion,
    line_start,
    statements,
    text,
)
from apps.agents.offline.transforms.analysis import _Kernel, _Loop

_ATOMIC_EXPRESSIONS = frozenset({
    "identifier", "number_literal", "parenthesized_expression", "field_expression",
    "subscript_expression", "call_expression", "cast_expression",
})  # fmt: skip


def _prefix(kernel: _Kernel, anchor: Node, lines: list[str]) -> list[Edit]:
    """Edits that put `lines` (pragmas or declarations) on their own lines before `anchor`."""
    source = kernel.source
    begin = line_start(source, anchor.start_byte)
    at_line_start = not source[begin : anchor.start_byte].strip()
    indent = indentation(source, anchor.start_byte)
    block = "".join(f"{indent}{line}\n" for line in lines)
    parent = anchor.parent
    if parent is not None and parent.type == "compound_statement":
        if at_line_start:
            return [insertion(begin, block)]
        gap = len(source[: anchor.start_byte].rstrip(b" \t"))  # `{ for`: break the line there
        return [Edit(gap, anchor.start_byte, f"\n{block}{indent}".encode())]
    # A braceless body (`for (...) for (...)`): a block keeps the new lines with the loop.
    opening = f"{indent}{{\n{block}" if at_line_start else f"{{\n{block}{indent}"
    return [
        insertion(begin if at_line_start else anchor.start_byte, opening),
        insertion(anchor.end_byte, f"\n{indent}}}"),
    ]


def _header_text(kernel: _Kernel, node: Node) -> str:
    """`for (...)` as written."""
    closing = [child for child in node.children if child.type == ")"][-1]
    return kernel.source[node.start_byte : closing.end_byte].decode("utf-8")


def _header_parens(node: Node) -> tuple[int, int]:
    opening = next(child for child in node.children if child.type == "(")
    closing = [child for child in node.children if child.type == ")"][-1]
    return opening.start_byte, closing.end_byte


def _indent_unit(kernel: _Kernel, loop: _Loop) -> str:
    base = indentation(kernel.source, loop.node.start_byte)
    body = field(loop.node, "body")
    inner = statements(body) if body is not None else []
    if inner and inner[0].start_point.row != loop.node.start_point.row:
        deeper = indentation(kernel.source, inner[0].start_byte)
        if deeper.startswith(base) and len(deeper) > len(base):
            return deeper[len(base) :]
    return "    "


def _rewritten(kernel: _Kernel, node: Node, edits: list[Edit]) -> str:
    """The text of `node` with edits (in source offsets) applied inside it."""
    shifted = [
        Edit(e.start - node.start_byte, e.end - node.start_byte, e.replacement) for e in edits
    ]
    return apply_edits(kernel.source[node.start_byte : node.end_byte], shifted).decode("utf-8")


def _relocated(kernel: _Kernel, node: Node, code: str) -> list[str]:
    """The lines of `code` (written where `node` is) with the node's own indentation removed."""
    own = indentation(kernel.source, node.start_byte)
    first, *rest = code.split("\n")
    return [first, *(line[len(own) :] if line.startswith(own) else line.lstrip() for line in rest)]


def _fresh_name(wanted: str, used: set[str]) -> str:
    name = wanted if wanted.isidentifier() else f"t_{wanted}"
    candidate, counter = name, 1
    while candidate in used:
        candidate, counter = f"{name}_{counter}", counter + 1
    used.add(candidate)
    return candidate


def _operand(node: Node) -> str:
    """The expression's text, parenthesised unless it is atomic."""
    inner = text(node)
    return inner if node.type in _ATOMIC_EXPRESSIONS else f"({inner})"
