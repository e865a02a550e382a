"""KernelBench layout: one Python file per problem under `level1/` … `level4/`.

A problem defines `class Model(nn.Module)`, module-level size constants, `get_inputs()` and
`get_init_inputs()`. Its sizes are GPU-scale, so the importer multiplies every size constant
(module-level ints of 9 and up; see scaling.py) by the scale and records it.
"""

from __future__ import annotations

import ast
import unicodedata
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
from apps.operators.scaling import scaled_size
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
        definition = problem_definition(path, label, source, tree, level=level, scale=scale)
    except ProblemError as error:
        return FoundProblem(label, failure=str(error), sort_key=sort_key)
    return FoundProblem(label, definition=definition, sort_key=sort_key)


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


def size_constants(tree: ast.Module) -> dict[str, int]:
    """Module-level `NAME = <int>` assignments, in file order."""
    constants: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name) and _is_int(value):
                constants[target.id] = int(value.value)  # type: ignore[attr-defined]
    return constants


def checked_sizes(tree: ast.Module, label: str) -> dict[str, int]:
    constants = size_constants(tree)
    for name, value in constants.items():
        if abs(value) > MAX_SIZE_CONSTANT:
            raise ProblemError(f"{label}: size constant {name} is over {MAX_SIZE_CONSTANT}")
    return constants


def _is_int(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


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
    params = {k: scaled_size(v, scale) for k, v in checked_sizes(tree, label).items()}
    spec = OperatorSpec(
        slug=slug_from_name(f"kb_l{level}", name),
        name=fitted_name(readable or name),
        family=family_from_names(name),
        level=level,
        description=description_of(tree, name),
        inputs=[],
        outputs=[],  # named from what the reference produces (services.with_described_tensors)
        cases=[CaseSpec(case_id="default", params=params, dtype="", timing=True)],
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
