"""NPUKernelBench layout: `levelN/Category/OperatorName/` folders.

Each holds `api_desc.md` (the description) and `validation/` with `module.py` (`Model`, the
reference; it imports torch_npu and a generated module, neutralised when it runs here),
`prepare_inputs.py` (`get_inputs(param, device=None)`, `get_init_inputs(param, device=None)`,
optionally `custom_check_precision(param, outputs, outputs_new)`) and `test_cases.csv`
(semicolon-separated, a `case_id` column, the other columns parameters).

The suite's runner reads test_cases.csv with pandas and hands each row to those functions,
which do `eval(param.get('shape', '[1]'))` and `getattr(torch, param.get('dtype'))`. A case's
params are that row, typed as pandas types it, column by column: a column of whole numbers
gives ints, of numbers floats, of True/False bools, any other column its cells' text
(`[128, 256]` stays text); an empty cell is NaN, stored as null. Then, as the runner's
preprocess_dataframe does, a number column with no empty cell whose values are all whole
gives ints (`1.0` is 1). reference_loading.suite_row hands it over.

A row whose dtype no target holds (complex64) is left out, saying so. A float16 or bfloat16
row runs as float32 (reference_loading.suite_row): the cpu-c target holds neither, and a reference
computed in half precision would make a float32 kernel miss tolerances it meets; the case's
`run_as` param says so.
"""

from __future__ import annotations

import ast
import csv
import io
import math
import re
from collections import Counter
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
from apps.operators.targets import TARGET_DTYPES

DTYPE_COLUMNS = ("dtype", "data_type", "input_dtype")
MAX_CASE_ID_CHARS = 100  # OperatorCase.case_id
DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32",
                 "float": "float32", "fp64": "float64", "double": "float64",
                 "cfloat": "complex64", "cdouble": "complex128", "chalf": "complex32"}  # fmt: skip
# PyTorch dtypes no target holds: a row naming one is left out rather than failing the rest.
UNREPRESENTABLE_DTYPES = ("complex32", "complex64", "complex128", "float8_e4m3fn",
                          "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16",
                          "uint32", "uint64")  # fmt: skip
HALF_DTYPES = ("float16", "bfloat16")
RUN_AS = "run_as"  # reference_loading.RUN_AS

# What pandas.read_csv reads as NaN, True and False by default.
NA_CELLS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan",
                      "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a",
                      "nan", "null"})  # fmt: skip
BOOL_CELLS = {"True": True, "TRUE": True, "true": True, "False": False, "FALSE": False,
              "false": False}  # fmt: skip
INT_CELL = re.compile(r"[+-]?\d{1,18}")  # longer ones pandas does not read as int64
FLOAT_CELL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|Inf|INF|"
                        r"infinity|Infinity)")  # fmt: skip


def discover(root: Path) -> list[FoundProblem]:
    folders = sorted({p.parent.parent for p in root.rglob("validation/module.py")})
    names = Counter((level_of(folder), folder.name) for folder in folders)
    # The suite has an operator of one name in two categories (level2's Activation/SwiGlu and
    # Math/SwiGlu): those two are told apart by their category.
    return [found_problem(folder, root=root,
                          by_category=names[level_of(folder), folder.name] > 1)
            for folder in folders]  # fmt: skip


def level_of(folder: Path) -> int:
    return level_from_path(folder) or 1  # the nearest levelN folder, even above root


def found_problem(folder: Path, *, root: Path, by_category: bool = False) -> FoundProblem:
    label = label_of(folder, root=root)
    level = level_of(folder)
    sort_key = (level, 0, label)
    try:
        require_utf8_name(folder, root=root)
        definition, left_out = problem_definition(folder, root=root, level=level,
                                                  by_category=by_category)  # fmt: skip
    except ProblemError as error:
        return FoundProblem(label, failure=str(error), sort_key=sort_key)
    return FoundProblem(label, definition=definition, sort_key=sort_key, left_out=left_out)


def problem_definition(
    folder: Path, *, root: Path, level: int, by_category: bool = False
) -> tuple[OperatorDefinition, tuple[str, ...]]:
    """The operator, and the rows left out because no target can hold them."""
    validation = folder / "validation"
    module = read_text(validation / "module.py", root=root)
    prepare = read_text(validation / "prepare_inputs.py", root=root)
    require_definitions(module, "Model", where=validation / "module.py", root=root, kind="class")
    require_definitions(prepare, "get_inputs", where=validation / "prepare_inputs.py", root=root,
                        kind="function")  # fmt: skip
    csv_path = validation / "test_cases.csv"
    where = str(csv_path.relative_to(root))
    cases, left_out = representable(parse_test_cases(read_text(csv_path, root=root), where=where),
                                    where=where)  # fmt: skip
    description = _description(folder, root)
    category = folder.parent.name if folder.parent != root else ""
    name = f"{category}_{folder.name}" if by_category else folder.name
    spec = OperatorSpec(
        slug=slug_from_name(f"npu_l{level}", name),
        name=fitted_name(folder.name),
        family=family_from_names(folder.name, category),
        level=level,
        description=description,
        inputs=[],
        outputs=[],  # named from what the reference produces (services.with_described_tensors)
        cases=cases,
    )
    definition = OperatorDefinition(
        spec=spec,
        reference_kind="npukernelbench",
        reference_source={"module": module, "prepare_inputs": prepare},
        origin="npukernelbench",
        origin_path=str(folder.relative_to(root)),
    )
    return definition, left_out


def representable(cases: list[CaseSpec], *, where: str) -> tuple[list[CaseSpec], tuple[str, ...]]:
    """The cases some target can hold, and a line for each one left out."""
    targets = ", ".join(TARGET_DTYPES)
    left_out = tuple(f"left out case {c.case_id}: {c.dtype} cannot be represented on {targets}"
                     for c in cases if c.dtype in UNREPRESENTABLE_DTYPES)  # fmt: skip
    kept = [c for c in cases if c.dtype not in UNREPRESENTABLE_DTYPES]
    if not kept:
        raise ProblemError(f"{where}: no row any target can represent ("
                           + "; ".join(line.removeprefix("left out ") for line in left_out)
                           + ")")  # fmt: skip
    return kept, left_out


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
    header = column_names([cell.strip() for cell in rows[0]])
    if "case_id" not in header:
        raise ProblemError(f"{where} line 1: no case_id column (columns: {', '.join(header)})")
    if len(set(header)) != len(header):
        twice = next(name for name in header if header.count(name) > 1)
        raise ProblemError(f"{where} line 1: column {twice!r} appears more than once")
    if RUN_AS in header:
        raise ProblemError(f"{where} line 1: column {RUN_AS!r} is the importer's own (it says "
                           "how a row runs)")  # fmt: skip
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
    for number, row in body:
        if len(row) != len(header):
            raise ProblemError(f"{where} line {number}: {len(row)} values for {len(header)} "
                               "columns")  # fmt: skip
    cells = [[cell.strip() for cell in row] for _, row in body]
    columns = [typed_column(name, [row[i] for row in cells], [n for n, _ in body], where=where)
               for i, name in enumerate(header)]  # fmt: skip
    cases = [case_from_row(header, row, [column[r] for column in columns],
                           where=f"{where} line {number}")
             for r, ((number, _), row) in enumerate(zip(body, cells, strict=True))]  # fmt: skip
    ids = [c.case_id for c in cases]
    if len(set(ids)) != len(ids):
        duplicate = next(i for i in ids if ids.count(i) > 1)
        raise ProblemError(f"{where}: case_id {duplicate!r} appears more than once")
    return cases


def column_names(header: list[str]) -> list[str]:
    """As pandas names them: a column with no name (a trailing ';') is 'Unnamed: N'."""
    return [name or f"Unnamed: {position}" for position, name in enumerate(header)]


def typed_column(name: str, cells: list[str], lines: list[int], *, where: str) -> list[Any]:
    """A column's cells as pandas.read_csv types them (see the module's docstring)."""
    present = [cell for cell in cells if cell not in NA_CELLS]
    if present and all(INT_CELL.fullmatch(c) for c in present) and len(present) == len(cells):
        return [int(cell) for cell in cells]
    if present and all(INT_CELL.fullmatch(c) or FLOAT_CELL.fullmatch(c) for c in present):
        numbers = [finite(cell, where=f"{where} line {line}, column {name}")
                   for cell, line in zip(cells, lines, strict=True)]  # fmt: skip
        return whole_where_all_are(numbers)
    if present and all(c in BOOL_CELLS for c in present):
        return [BOOL_CELLS.get(cell) for cell in cells]
    return [None if cell in NA_CELLS else cell for cell in cells]


def whole_where_all_are(numbers: list[float | None]) -> list[Any]:
    """The suite's runner passes the frame through framework.utils.preprocess_dataframe: a
    number column with no empty cell whose values are all whole becomes ints (`1.0` is 1)."""
    if all(n is not None and n.is_integer() for n in numbers):
        return [int(n) for n in numbers if n is not None]
    return numbers


def finite(cell: str, *, where: str) -> float | None:
    if cell in NA_CELLS:
        return None  # NaN, which JSON cannot hold; reference_loading.suite_row gives NaN back
    value = float(cell)
    if not math.isfinite(value):  # a JSON number cannot be infinite
        raise ProblemError(f"{where}: {cell[:60]!r} is not a finite number")
    return value


def case_from_row(
    header: list[str], cells: list[str], values: list[Any], *, where: str
) -> CaseSpec:
    row = dict(zip(header, values, strict=True))
    case_id = cells[header.index("case_id")]
    if not case_id or row["case_id"] is None:
        raise ProblemError(f"{where}: empty case_id")
    if len(case_id) > MAX_CASE_ID_CHARS:
        raise ProblemError(f"{where}, column case_id: {len(case_id)} characters, over the "
                           f"limit of {MAX_CASE_ID_CHARS}")  # fmt: skip
    dtype = case_dtype(row, where=where)
    if dtype in HALF_DTYPES:
        row[RUN_AS] = f"float32 (row says {dtype})"
        dtype = "float32"
    return CaseSpec(case_id=case_id, params=row, dtype=dtype)


def case_dtype(values: dict[str, Any], *, where: str) -> str:
    for column in DTYPE_COLUMNS:
        if column in values and values[column] is not None:
            raw = str(values[column]).strip().removeprefix("torch.")
            dtype = DTYPE_ALIASES.get(raw, raw)
            if dtype not in DTYPES and dtype not in UNREPRESENTABLE_DTYPES:
                raise ProblemError(f"{where}, column {column}: unknown dtype {values[column]!r}")
            return dtype
    return ""  # not stated: the case takes the dtype its reference produces
