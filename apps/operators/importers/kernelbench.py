"""KernelBench layout: one Python file per problem under `level1/` … `level4/`.

A problem defines `class Model(nn.Module)`, module-level size constants, `get_inputs()` and
`get_init_inputs()`. Its sizes are GPU-scale, so the importer shrinks them (scaling.py) by the
scale asked, and, should the reference fail there (a kernel larger than the shrunk input,
channels no longer divisible by groups), by the same factor with sizes kept together, then by
twice the factor and so on up to 1 (`FoundProblem.fallbacks`, tried in order at import).

The sizes are each case's params (refrun sets the module's constants from them): `default`,
the timing case, and two smaller ones for checking a kernel on more than one shape,
`derived-small` and `derived-odd`, left out at import when the reference fails on them.
"""

from __future__ import annotations

import ast
import json
import unicodedata
from dataclasses import replace
from pathlib import Path

from apps.operators.definitions import OperatorDefinition
from apps.operators.importers.common import (
    FoundProblem,
    ProblemError,
    family_from_names,
    fitted_name,
    label_of,
    leading_number,
    level_from_path,
    read_text,
    require_utf8_name,
    slug_from_name,
)
from apps.operators.scaling import Constants, odd_constants, scaled_constants
from apps.operators.spec import CaseSpec, OperatorSpec

REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")
MAX_SIZE_CONSTANT = 2**62  # beyond any tensor; larger ones do not survive scaling as floats


def discover(root: Path, *, scale: float) -> list[FoundProblem]:
    files = sorted(p for p in root.rglob("*.py") if not p.name.startswith(("_", ".")))
    return [found_problem(path, root=root, scale=scale) for path in files]


def found_problem(path: Path, *, root: Path, scale: float) -> FoundProblem:
    label = label_of(path, root=root)
    level = level_from_path(path.parent) or 1  # the nearest levelN folder, even above root
    sort_key = (level, leading_number(path.stem), label)
    try:
        require_utf8_name(path, root=root)
        source = read_text(path, root=root)
        tree = parse(source, label)
        missing = missing_definitions(tree)
        if missing == ["Model", *REQUIRED_FUNCTIONS]:
            return FoundProblem(label, skip_reason="not a KernelBench problem (no class Model)",
                                sort_key=sort_key)  # fmt: skip
        if missing:
            raise ProblemError(f"{label}: defines no {', '.join(missing)}")
        base = problem_definition(path, label, source, tree, level=level, scale=scale)
        first, *fallbacks = sized_definitions(base, checked_sizes(tree, label), scale)
    except ProblemError as error:
        return FoundProblem(label, failure=str(error), sort_key=sort_key)
    return FoundProblem(label, definition=first, sort_key=sort_key, fallbacks=tuple(fallbacks))


def parse(source: str, label: str) -> ast.Module:
    try:
        return ast.parse(source, filename=label)
    except SyntaxError as error:
        raise ProblemError(f"{label} line {error.lineno}: syntax error: {error.msg}") from None
    except (ValueError, MemoryError, RecursionError):  # a NUL byte; nesting the parser refuses
        raise ProblemError(f"{label}: not Python the importer can parse") from None


def missing_definitions(tree: ast.Module) -> list[str]:
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = [] if "Model" in classes else ["Model"]
    return missing + [f for f in REQUIRED_FUNCTIONS if f not in functions]


def size_constants(tree: ast.Module) -> Constants:
    """Module-level `NAME = <int>` and `NAME = (<int>, ...)` assignments, in file order."""
    constants: Constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if not isinstance(target, ast.Name):
                continue
            if _is_int(value):
                constants[target.id] = int(value.value)  # type: ignore[attr-defined]
            elif isinstance(value, ast.Tuple) and value.elts and all(map(_is_int, value.elts)):
                constants[target.id] = [int(e.value) for e in value.elts]  # type: ignore[attr-defined]
    return constants


def checked_sizes(tree: ast.Module, label: str) -> Constants:
    constants = size_constants(tree)
    for name, value in constants.items():
        if any(abs(v) > MAX_SIZE_CONSTANT for v in (value if isinstance(value, list) else [value])):
            raise ProblemError(f"{label}: size constant {name} is over {MAX_SIZE_CONSTANT}")
    return constants


def _is_int(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def factors(scale: float) -> list[float]:
    """The scale asked, then twice it, and so on up to 1."""
    tried = [scale]
    while tried[-1] < 1:
        tried.append(min(1.0, tried[-1] * 2))
    return tried


def sized_definitions(
    base: OperatorDefinition, constants: Constants, scale: float
) -> list[OperatorDefinition]:
    """The problem at each factor and way of shrinking, in the order to try them; ways that
    give the same sizes as one before are left out."""
    seen: set[str] = set()
    definitions = []
    for factor in factors(scale):
        for together in (False, True):
            sizes = scaled_constants(constants, factor, together=together)
            key = json.dumps(sizes, sort_keys=True)
            if key not in seen:
                seen.add(key)
                definitions.append(sized(base, constants, sizes, factor, together=together))
    return definitions


def sized(
    base: OperatorDefinition,
    constants: Constants,
    sizes: Constants,
    factor: float,
    *,
    together: bool,
) -> OperatorDefinition:
    cases = [CaseSpec(case_id="default", params=sizes, dtype="", timing=True)]
    small = scaled_constants(constants, factor / 2, together=True)
    odd = odd_constants(constants, small)
    for case_id, params in (("derived-small", small), ("derived-odd", odd)):
        if all(params != case.params for case in cases):
            cases.append(CaseSpec(case_id=case_id, params=params, dtype=""))
    source = {**base.reference_source, "scale": factor}
    if together:
        source["sizes"] = "together"
    return replace(base, spec=replace(base.spec, cases=cases), reference_source=source,
                   scale=factor)  # fmt: skip


def sizes_label(definition: OperatorDefinition) -> str:
    """'scale 0.25', or 'scale 0.25 with sizes kept together'."""
    together = definition.reference_source.get("sizes") == "together"
    return f"scale {definition.scale:g}" + (" with sizes kept together" if together else "")


def description_of(tree: ast.Module, name: str) -> str:
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    text = ast.get_docstring(model) or ast.get_docstring(tree) or ""
    return without_control_characters(text).strip() or f"KernelBench problem {name}."


def without_control_characters(text: str) -> str:
    """A docstring may spell a NUL or another control character as an escape (`'\\0'`):
    PostgreSQL's jsonb stores no NUL, and none of them means anything in a description."""
    return "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) != "Cc")


def problem_definition(
    path: Path, label: str, source: str, tree: ast.Module, *, level: int, scale: float
) -> OperatorDefinition:
    name = path.stem
    readable = " ".join(name.split("_")[1:] if name[:1].isdigit() else name.split("_"))
    spec = OperatorSpec(
        slug=slug_from_name(f"kb_l{level}", name),
        name=fitted_name(readable or name),
        family=family_from_names(name),
        level=level,
        description=description_of(tree, name),
        inputs=[],
        outputs=[],  # named from what the reference produces (services.with_described_tensors)
        cases=[],  # one set of sizes per factor tried (sized_definitions)
        order=leading_number(name),
    )
    return OperatorDefinition(
        spec=spec,
        reference_kind="kernelbench",
        reference_source={"problem": source, "scale": scale},
        origin="kernelbench",
        origin_path=label,
        scale=scale,
    )
