"""Typed conveniences over tree-sitter's C grammar, for the source transformations.

Parsing (with the first syntax error reported by line), walking subtrees, the names a subtree
declares, writes and reads, lexical lookup of a name's declaration, a rough C type for an
expression, and edits by byte range. Every structural question is answered from the syntax
tree; C text is never matched with regular expressions. All offsets are byte offsets into the
UTF-8 encoding of the source, as tree-sitter reports them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import tree_sitter_c
from tree_sitter import Language, Node, Parser, Tree


class TransformError(ValueError):
    """The strategy does not apply to this source; the message says why and where (loop id,
    line)."""


@functools.cache
def _language() -> Language:
    return Language(tree_sitter_c.language())


def parse(source: bytes) -> Tree:
    # A parser per call: cheap, and nothing is shared between threads.
    return Parser(_language()).parse(source)


def text(node: Node) -> str:
    return (node.text or b"").decode("utf-8")


def squashed(node: Node) -> str:
    """The node's text without whitespace: two spellings of one expression compare equal."""
    return "".join(text(node).split())


def line_of(node: Node) -> int:
    return node.start_point.row + 1


def walk(node: Node) -> Iterator[Node]:
    """The node and all its descendants, in source (pre-)order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def called_functions(node: Node) -> Iterator[str]:
    """The name of every function called under `node`, as written (`expf`, `sqrt`)."""
    for inner in walk(node):
        if inner.type == "call_expression":
            function = inner.child_by_field_name("function")
            if function is not None:
                yield text(function)


def first_syntax_error(tree: Tree) -> Node | None:
    for node in walk(tree.root_node):
        if node.is_error or node.is_missing:
            return node
    return None


def require_parsable(source: bytes, what: str) -> Tree:
    tree = parse(source)
    broken = first_syntax_error(tree)
    if broken is not None:
        raise TransformError(f"{what}: C syntax error at line {line_of(broken)}")
    return tree


def field(node: Node, name: str) -> Node | None:
    return node.child_by_field_name(name)


def operator(node: Node) -> str:
    """The operator token of a binary, assignment, update or unary expression ('' if none)."""
    token = node.child_by_field_name("operator")
    return token.type if token is not None else ""


def contains(outer: Node, inner: Node) -> bool:
    return outer.start_byte <= inner.start_byte and inner.end_byte <= outer.end_byte


def same(a: Node | None, b: Node | None) -> bool:
    return a is not None and b is not None and a.id == b.id


def statements(block: Node) -> list[Node]:
    """The statements of a compound statement (or the one statement of a braceless body),
    comments left out."""
    if block.type != "compound_statement":
        return [block]
    return [child for child in block.named_children if child.type != "comment"]


def is_pragma(node: Node) -> bool:
    directive = field(node, "directive")
    return node.type == "preproc_call" and directive is not None and text(directive) == "#pragma"


def pragma_text(node: Node) -> str:
    argument = field(node, "argument")
    return text(argument).strip() if argument is not None else ""


def strip_parens(node: Node) -> Node:
    while node.type == "parenthesized_expression" and node.named_child_count == 1:
        inner = node.named_children[0]
        if inner.type == "comment":
            break
        node = inner
    return node


def strip_parens_and_casts(node: Node) -> Node:
    while True:
        node = strip_parens(node)
        value = field(node, "value") if node.type == "cast_expression" else None
        if value is None:
            return node
        node = value


def identifiers(node: Node) -> list[str]:
    """Names of the ordinary identifiers in the subtree (not field or type names)."""
    return [text(n) for n in walk(node) if n.type == "identifier"]


def declarator_name(declarator: Node) -> str | None:
    """The name a declarator declares: `x`, `*x`, `x[3]`, `x = 1`, `*restrict x = ...`."""
    while declarator.type != "identifier":
        inner = field(declarator, "declarator")
        if inner is None:
            return None
        declarator = inner
    return text(declarator)


def declarators(declaration: Node) -> list[Node]:
    """The declarators of a declaration or parameter: one per declared name."""
    return declaration.children_by_field_name("declarator")


def declared_names(node: Node) -> set[str]:
    names = set()
    for n in walk(node):
        if n.type in ("declaration", "parameter_declaration"):
            for declarator in declarators(n):
                name = declarator_name(declarator)
                if name is not None:
                    names.add(name)
    return names


def written_target(node: Node) -> Node | None:
    """What an assignment or increment writes; None for other nodes."""
    if node.type == "assignment_expression":
        return field(node, "left")
    if node.type == "update_expression":
        return field(node, "argument")
    return None


def written_names(node: Node) -> set[str]:
    """Scalars the subtree assigns, increments or takes the address of (so may change)."""
    names = set()
    for n in walk(node):
        target = written_target(n)
        if n.type == "pointer_expression" and operator(n) == "&":
            target = field(n, "argument")
        if target is not None and strip_parens(target).type == "identifier":
            names.add(text(strip_parens(target)))
    return names


LOOP_STATEMENTS = ("for_statement", "while_statement", "do_statement")


def escapes(body: Node, continues: bool = False) -> Node | None:
    """A return, goto, or break out of this loop body (OpenMP loops forbid them); with
    `continues`, a continue of the loop itself too (it skips the rest of an iteration)."""
    for n in walk(body):
        if n.type in ("return_statement", "goto_statement"):
            return n
        if n.type == "break_statement" and not _has_own_target(n, body, "switch_statement"):
            return n
        if continues and n.type == "continue_statement" and not _has_own_target(n, body):
            return n
    return None


def _has_own_target(node: Node, body: Node, *others: str) -> bool:
    """Whether a loop (or one of `others`) inside `body` is what the jump leaves."""
    parent = node.parent
    while parent is not None and contains(body, parent) and not same(parent, body):
        if parent.type in LOOP_STATEMENTS or parent.type in others:
            return True
        parent = parent.parent
    return False


def visible_declaration(name: str, at: Node) -> tuple[Node, Node] | None:
    """The (declaration, declarator) that `name` refers to at `at`, by lexical lookup through
    enclosing blocks, for headers and the function's parameters."""
    child, scope = at, at.parent
    while scope is not None:
        if scope.type == "compound_statement":
            candidates = [s for s in scope.named_children if s.end_byte <= child.start_byte]
        elif scope.type == "for_statement":
            initializer = field(scope, "initializer")
            candidates = [initializer] if initializer is not None else []
        elif scope.type == "function_definition":
            candidates = _parameters(scope)
        else:
            candidates = []
        for candidate in reversed(candidates):
            found = _declarator_for(candidate, name)
            if found is not None:
                return candidate, found
        child, scope = scope, scope.parent
    return None


def _parameters(function: Node) -> list[Node]:
    declarator = field(function, "declarator")
    while declarator is not None and declarator.type != "function_declarator":
        declarator = field(declarator, "declarator")
    parameters = field(declarator, "parameters") if declarator is not None else None
    return [] if parameters is None else parameters.named_children


def parameter_names(function: Node) -> list[str]:
    names = []
    for parameter in _parameters(function):
        found = [declarator_name(d) for d in declarators(parameter)]
        names.append(found[0] if found and found[0] is not None else "")
    return names


def _declarator_for(statement: Node, name: str) -> Node | None:
    if statement.type not in ("declaration", "parameter_declaration"):
        return None
    for declarator in declarators(statement):
        if declarator_name(declarator) == name:
            return declarator
    return None


def is_scalar_declarator(declarator: Node) -> bool:
    """`x` or `x = ...`: not a pointer, array or function."""
    if declarator.type == "init_declarator":
        inner = field(declarator, "declarator")
        return inner is not None and inner.type == "identifier"
    return declarator.type == "identifier"


def kernel_function(tree: Tree, name: str) -> Node | None:
    return next((node for node, named in defined_functions(tree) if named == name), None)


def defined_functions(tree: Tree) -> Iterator[tuple[Node, str]]:
    """The translation unit's function definitions and their names, in source order."""
    for node in tree.root_node.named_children:
        if node.type == "function_definition":
            declarator = field(node, "declarator")
            while declarator is not None and declarator.type != "function_declarator":
                declarator = field(declarator, "declarator")
            named = field(declarator, "declarator") if declarator is not None else None
            if named is not None:
                yield node, text(named)


# --- rough C types ------------------------------------------------------------------------

SIGNED_INTEGERS = frozenset({
    "int", "short", "long", "long long", "long int", "long long int", "short int", "signed",
    "signed int", "int8_t", "int16_t", "int32_t", "int64_t", "ptrdiff_t",
})  # fmt: skip
WIDE_INTEGERS = frozenset(
    {"long", "long long", "long int", "long long int", "int64_t", "ptrdiff_t"}
)
FLOATS = frozenset({"float", "double"})
FLOAT_FUNCTIONS = frozenset({
    "expf", "logf", "sqrtf", "fabsf", "fmaxf", "fminf", "erff", "tanhf", "powf", "sinf", "cosf",
})  # fmt: skip
DOUBLE_FUNCTIONS = frozenset({
    "exp", "log", "sqrt", "fabs", "fmax", "fmin", "erf", "tanh", "pow", "sin", "cos",
})  # fmt: skip


@dataclass(frozen=True)
class CType:
    base: str  # "float", "int64_t", "kope_tensor", ...
    pointers: int = 0

    @property
    def is_float(self) -> bool:
        return self.pointers == 0 and self.base in FLOATS

    @property
    def is_signed_integer(self) -> bool:
        return self.pointers == 0 and self.base in SIGNED_INTEGERS


def _type_name(type_node: Node) -> str:
    return " ".join(text(type_node).split())


def _pointer_depth(declarator: Node | None) -> int:
    depth = 0
    while declarator is not None:
        if declarator.type in (
            "pointer_declarator", "abstract_pointer_declarator", "array_declarator",
            "abstract_array_declarator",
        ):  # fmt: skip
            depth += 1
        declarator = field(declarator, "declarator")
    return depth


def declared_types(function: Node) -> dict[str, CType | None]:
    """Every name the function declares, with its type; None where two declarations of one
    name disagree (the table is flat, so a conflict means 'unknown')."""
    table: dict[str, CType | None] = {}
    for node in walk(function):
        if node.type not in ("declaration", "parameter_declaration"):
            continue
        type_node = field(node, "type")
        if type_node is None:
            continue
        for declarator in declarators(node):
            name = declarator_name(declarator)
            if name is None:
                continue
            ctype = CType(_type_name(type_node), _pointer_depth(declarator))
            table[name] = ctype if table.get(name, ctype) == ctype else None
    return table


def expression_type(node: Node, types: dict[str, CType | None]) -> CType | None:
    """The C type of an expression where the usual rules make it plain; None otherwise."""
    node = strip_parens(node)
    kind = node.type
    if kind == "identifier":
        return types.get(text(node))
    if kind == "number_literal":
        return _literal_type(text(node))
    if kind == "cast_expression":
        descriptor = field(node, "type")
        type_node = field(descriptor, "type") if descriptor is not None else None
        if descriptor is None or type_node is None:
            return None
        return CType(_type_name(type_node), _pointer_depth(field(descriptor, "declarator")))
    if kind == "subscript_expression":
        argument = field(node, "argument")
        array = expression_type(argument, types) if argument is not None else None
        return CType(array.base, array.pointers - 1) if array and array.pointers else None
    if kind == "unary_expression" and operator(node) in ("-", "+"):
        argument = field(node, "argument")
        return expression_type(argument, types) if argument is not None else None
    if kind == "binary_expression":
        return _binary_type(node, types)
    if kind == "call_expression":
        function = field(node, "function")
        name = text(function) if function is not None else ""
        if name in FLOAT_FUNCTIONS:
            return CType("float")
        return CType("double") if name in DOUBLE_FUNCTIONS else None
    return None


def _literal_type(literal: str) -> CType:
    lowered = literal.lower()
    if lowered.startswith("0x"):
        return CType("int64_t" if "l" in lowered else "int")
    if "." in lowered or "e" in lowered:
        return CType("float" if lowered.endswith("f") else "double")
    return CType("int64_t" if "l" in lowered else "int")


def _binary_type(node: Node, types: dict[str, CType | None]) -> CType | None:
    left, right = field(node, "left"), field(node, "right")
    if left is None or right is None:
        return None
    op = operator(node)
    if op in ("<", "<=", ">", ">=", "==", "!=", "&&", "||"):
        return CType("int")
    a, b = expression_type(left, types), expression_type(right, types)
    if a is None or b is None:
        return None
    if a.pointers or b.pointers:
        return a if a.pointers else b
    for wider in ("double", "float"):
        if wider in (a.base, b.base):
            return CType(wider)
    if a.is_signed_integer and b.is_signed_integer:
        return CType("int64_t" if {a.base, b.base} & WIDE_INTEGERS else "int")
    return None


# --- edits ----------------------------------------------------------------------------------


class Edit(NamedTuple):
    start: int
    end: int
    replacement: bytes


def insertion(at: int, replacement: str) -> Edit:
    return Edit(at, at, replacement.encode("utf-8"))


def replacement(node: Node, replacement: str) -> Edit:
    return Edit(node.start_byte, node.end_byte, replacement.encode("utf-8"))


def apply_edits(source: bytes, edits: Iterable[Edit]) -> bytes:
    """Apply non-overlapping edits; insertions at one offset keep their given order."""
    ordered = sorted(edits, key=lambda edit: (edit.start, edit.end))
    pieces, cursor = [], 0
    for edit in ordered:
        if edit.start < cursor:
            raise TransformError("internal: overlapping edits")
        pieces += [source[cursor : edit.start], edit.replacement]
        cursor = edit.end
    pieces.append(source[cursor:])
    return b"".join(pieces)


def line_start(source: bytes, offset: int) -> int:
    return source.rfind(b"\n", 0, offset) + 1


def indentation(source: bytes, offset: int) -> str:
    """The leading whitespace of the line holding `offset`."""
    start = line_start(source, offset)
    end = start
    while end < len(source) and source[end : end + 1] in (b" ", b"\t"):
        end += 1
    return source[start:end].decode("utf-8")


def reindented(code: str, extra: str) -> str:
    """`code` with `extra` added to the indentation of every line but the first (which
    continues wherever it is placed); blank lines stay empty."""
    first, *rest = code.split("\n")
    return "\n".join([first] + [extra + line if line.strip() else line for line in rest])
