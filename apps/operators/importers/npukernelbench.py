"""NPUKernelBench layout: `levelN/Category/OperatorName/` folders.

Each holds `api_desc.md` (the description) and `validation/` with `module.py` (`Model`, the
reference; it imports torch_npu and a generated module, neutralised when it runs here),
`prepare_inputs.py` (`get_inputs(param, device=None)`, `get_init_inputs(param, device=None)`,
optionally `custom_check_precision(param, outputs, outputs_new)`) and `test_cases.csv`
(semicolon-separated, a `case_id` column, the other columns parameters, values may be Python
literals such as `[128, 256]`).
"""

from __future__ import annotations

import ast
import csv
import io
import math
from pathlib import Path
from typing import Any

from django.conf import settings

from apps.operators.definitions import OperatorDefinition
from apps.operators.importers.common import (
    FoundProblem,
    ProblemError,
    family_from_names,
    fitted_name,
    label_of,
    level_from_path,
    read_text,
    require_utf8_name,
    slug_from_name,
)
from apps.operators.spec import DTYPES, CaseSpec, OperatorSpec

DTYPE_COLUMNS = ("dtype", "data_type", "input_dtype")
MAX_CASE_ID_CHARS = 100  # OperatorCase.case_id
DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32",
                 "float": "float32", "fp64": "float64", "double": "float64"}  # fmt: skip


def discover(root: Path) -> list[FoundProblem]:
    folders = sorted({p.parent.parent for p in root.rglob("validation/module.py")})
    found = [found_problem(folder, root=root) for folder in folders]
    return found


def found_problem(folder: Path, *, root: Path) -> FoundProblem:
    label = label_of(folder, root=root)
    level = level_from_path(folder) or 1  # the nearest levelN folder, even above root
    sort_key = (level, 0, label)
    try:
        require_utf8_name(folder, root=root)
        definition = problem_definition(folder, root=root, level=level)
    except ProblemError as error:
        return FoundProblem(label, failure=str(error), sort_key=sort_key)
    return FoundProblem(label, definition=definition, sort_key=sort_key)


def problem_definition(folder: Path, *, root: Path, level: int) -> OperatorDefinition:
    validation = folder / "validation"
    module = read_text(validation / "module.py", root=root)
    prepare = read_text(validation / "prepare_inputs.py", root=root)
    require_definitions(module, "Model", where=validation / "module.py", root=root, kind="class")
    require_definitions(prepare, "get_inputs", where=validation / "prepare_inputs.py", root=root,
                        kind="function")  # fmt: skip
    csv_path = validation / "test_cases.csv"
    cases = parse_test_cases(read_text(csv_path, root=root), where=str(csv_path.relative_to(root)))
    description = _description(folder, root)
    category = folder.parent.name if folder.parent != root else ""
    spec = OperatorSpec(
        slug=slug_from_name(f"npu_l{level}", folder.name),
        name=fitted_name(folder.name),
        family=family_from_names(folder.name, category),
        level=level,
        description=description,
        inputs=[],
        outputs=[],  # named from what the reference produces (services.with_described_tensors)
        cases=cases,
    )
    return OperatorDefinition(
        spec=spec,
        reference_kind="npukernelbench",
        reference_source={"module": module, "prepare_inputs": prepare},
        origin="npukernelbench",
        origin_path=str(folder.relative_to(root)),
    )


def _description(folder: Path, root: Path) -> str:
    if not (folder / "api_desc.md").exists():
        return f"NPUKernelBench operator {folder.name} (no api_desc.md)."
    return (
        read_text(folder / "api_desc.md", root=root).strip()
        or f"NPUKernelBench operator {folder.name}."
    )


def require_definitions(source: str, name: str, *, where: Path, root: Path, kind: str) -> None:
    label = where.relative_to(root)
    try:
        tree = ast.parse(source, filename=str(label))
    except SyntaxError as error:
        raise ProblemError(f"{label} line {error.lineno}: syntax error: {error.msg}") from None
    except (ValueError, MemoryError, RecursionError):  # a NUL byte; nesting the parser refuses
        raise ProblemError(f"{label}: not Python the importer can parse") from None
    node_type = ast.ClassDef if kind == "class" else ast.FunctionDef
    if not any(isinstance(n, node_type) and n.name == name for n in tree.body):
        raise ProblemError(f"{label}: defines no {kind} {name}")


def parse_test_cases(text: str, *, where: str) -> list[CaseSpec]:
    if "\x00" in text:  # csv reads it as text since Python 3.11; PostgreSQL cannot store it
        raise ProblemError(f"{where}: holds a NUL character (character {text.index(chr(0))})")
    try:
        rows = list(csv.reader(io.StringIO(text), delimiter=";"))
    except csv.Error as error:  # a field over csv's 128 KiB limit, a NUL byte
        raise ProblemError(f"{where}: not readable as CSV: {error}") from None
    if not rows or not any(cell.strip() for cell in rows[0]):
        raise ProblemError(f"{where}: empty (a header line with case_id is needed)")
    header = [cell.strip() for cell in rows[0]]
    if "case_id" not in header:
        raise ProblemError(f"{where} line 1: no case_id column (columns: {', '.join(header)})")
    named = [name for name in header if name]  # a trailing ";" gives an unnamed column
    if len(set(named)) != len(named):
        twice = next(name for name in named if named.count(name) > 1)
        raise ProblemError(f"{where} line 1: column {twice!r} appears more than once")
    body = [
        (number, row) for number, row in enumerate(rows[1:], start=2) if any(c.strip() for c in row)
    ]
    limit = settings.KOPE_IMPORT_MAX_CASES
    if len(body) > limit:
        raise ProblemError(
            f"{where}: {len(body)} cases, over the limit of {limit} (KOPE_IMPORT_MAX_CASES)"
        )
    if not body:
        raise ProblemError(f"{where}: no test cases below the header")
    cases = [case_from_row(header, row, where=f"{where} line {number}") for number, row in body]
    ids = [c.case_id for c in cases]
    if len(set(ids)) != len(ids):
        duplicate = next(i for i in ids if ids.count(i) > 1)
        raise ProblemError(f"{where}: case_id {duplicate!r} appears more than once")
    return cases


def case_from_row(header: list[str], row: list[str], *, where: str) -> CaseSpec:
    if len(row) != len(header):
        raise ProblemError(f"{where}: {len(row)} values for {len(header)} columns")
    values = {name: literal(cell.strip(), where=f"{where}, column {name}")
              for name, cell in zip(header, row, strict=True)}  # fmt: skip
    case_id = str(values.pop("case_id"))
    if not case_id:
        raise ProblemError(f"{where}: empty case_id")
    if len(case_id) > MAX_CASE_ID_CHARS:
        raise ProblemError(f"{where}, column case_id: {len(case_id)} characters, over the "
                           f"limit of {MAX_CASE_ID_CHARS}")  # fmt: skip
    return CaseSpec(case_id=case_id, params=values, dtype=case_dtype(values, where=where))


def literal(cell: str, *, where: str) -> Any:
    """A Python literal (`[128, 256]`, `1e-5`, `True`), else the cell as text. The value is
    stored as JSON, so sets, bytes, complex numbers, inf, nan and NUL characters are refused."""
    if "\x00" in cell:
        raise ProblemError(f"{where}: holds a NUL character")
    try:
        value = ast.literal_eval(cell)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        if cell[:1] in "[({" or cell.count("'") % 2 or cell.count('"') % 2:
            raise ProblemError(f"{where}: {cell[:60]!r} is not a valid Python literal") from None
        return cell
    if not _json_plain(value):
        raise ProblemError(f"{where}: {cell[:60]!r} is not a number, text, True/False, None, "
                           "or a list or dict of those")  # fmt: skip
    return value


def _json_plain(value: Any, depth: int = 0) -> bool:
    if depth > 32:
        return False
    if isinstance(value, str):
        return "\x00" not in value  # PostgreSQL's JSON holds no NUL
    if value is None or isinstance(value, bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_json_plain(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_plain(k) and _json_plain(v, depth + 1)
                   for k, v in value.items())  # fmt: skip
    return False


def case_dtype(values: dict[str, Any], *, where: str) -> str:
    for column in DTYPE_COLUMNS:
        if column in values:
            raw = str(values[column]).strip().removeprefix("torch.")
            dtype = DTYPE_ALIASES.get(raw, raw)
            if dtype not in DTYPES:
                raise ProblemError(f"{where}, column {column}: unknown dtype {values[column]!r}")
            return dtype
    return ""  # not stated: the case takes the dtype its reference produces
