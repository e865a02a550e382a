"""Bad input to the importers and the operator spec: NPUKernelBench CSVs, KernelBench and
NPUKernelBench Python files, operator.toml. Each parser returns its normal result or raises
its own error (ProblemError, SpecError) naming the file; an import of broken problems stores
nothing and finishes with a reason for each.

The regression inputs are the ones that crashed before the parsers were fixed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.accounts.models import Team
from apps.operators.importers import kernelbench, npukernelbench
from apps.operators.importers.common import ProblemError, read_text
from apps.operators.importing import import_execute, import_start
from apps.operators.models import ImportRun, Operator, OperatorCase, OperatorVersion, StartingKernel
from apps.operators.spec import OperatorSpec, SpecError, parse_operator_toml
from tests.operators.conftest import SAMPLES

FUZZ = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
BUILTIN = Path(__file__).resolve().parents[2] / "apps" / "operators" / "builtin"
RELU_CSV = (SAMPLES / "npukernelbench/level1/activation/Relu/validation/test_cases.csv").read_text()
RELU_PY = (SAMPLES / "kernelbench/level1/1_ReLU.py").read_text()
VECTOR_ADD_TOML = (BUILTIN / "vector_add" / "operator.toml").read_text()

TOKENS = st.sampled_from(["case_id", ";", "\n", "[", "]", "(", ")", "{", "}", "'", '"', ",",
                          "1", "-", "1e999", "nan", "9" * 5000, "float16", "dtype", "\x00",
                          "{1, 2}", "b'x'", "1j", "'\\x00'", "é", "\ufeff", "=", "def ",
                          "class Model", ":", "    ", "get_inputs", "x" * 300])  # fmt: skip
NOISE = st.one_of(st.text(max_size=300), st.lists(TOKENS, max_size=60).map("".join))


def spliced(real: str) -> st.SearchStrategy[str]:
    """A real file cut at a random point, with noise put in at another."""
    return st.tuples(st.integers(0, len(real)), NOISE, st.integers(0, len(real))).map(
        lambda t: real[: t[0]] + t[1] + real[t[2] :]
    )


def storable(value: Any) -> bool:
    """What PostgreSQL's jsonb takes: strict JSON (no nan, inf) without NUL characters."""
    return "\\u0000" not in json.dumps(value, allow_nan=False, sort_keys=True)


# ---------------------------------------------------------------------------------------------
# NPUKernelBench test_cases.csv


@pytest.mark.parametrize(
    ("csv", "complaint"),
    [
        ("case_id;a\n1;" + "x" * 200_000, "not readable as CSV: field larger than field limit"),
        ("case_id;a\n1;1e999", "'1e999' is not a finite number"),
        ("case_id;a\n1;2\n2;-inf", "'-inf' is not a finite number"),
    ],
)
def test_a_csv_cell_that_cannot_be_stored_fails_its_operator_naming_line_and_column(
    csv: str, complaint: str
) -> None:
    with pytest.raises(ProblemError, match=f"^t.csv(?: line [23], column a)?: {complaint}"):
        npukernelbench.parse_test_cases(csv, where="t.csv")


@pytest.mark.parametrize("cell", ["{1, 2}", "b'x'", "'\\x00'", "{1: 2}", "[128, 256]"])
def test_a_cell_that_is_no_number_is_kept_as_its_text(cell: str) -> None:
    """As pandas gives it to the suite's get_inputs (which may eval it)."""
    [case] = npukernelbench.parse_test_cases(f"case_id;a\n1;{cell}", where="t.csv")
    assert case.params == {"case_id": 1, "a": cell}


def test_a_ten_thousand_case_csv_is_refused_at_the_default_limit() -> None:
    rows = "".join(f"{n};[128, 256];float32\n" for n in range(10_000))
    with pytest.raises(ProblemError) as refused:
        npukernelbench.parse_test_cases("case_id;shape;dtype\n" + rows, where="t.csv")
    assert str(refused.value) == (
        "t.csv: 10000 cases, over the limit of 200 (KOPE_IMPORT_MAX_CASES)"
    )


@FUZZ
@given(st.one_of(NOISE, spliced(RELU_CSV)))
def test_a_csv_gives_storable_cases_or_a_problem_naming_the_file(text: str) -> None:
    try:
        cases = npukernelbench.parse_test_cases(text, where="t.csv")
    except ProblemError as error:
        assert str(error).startswith("t.csv")
        return
    assert cases and all(storable(c.params) and c.case_id and "\x00" not in c.case_id
                         for c in cases)  # fmt: skip


@FUZZ
@given(
    st.lists(
        st.lists(st.one_of(st.text(max_size=20), st.from_regex(r"\[[0-9, ]{0,20}\]",
                                                                fullmatch=True),
                           st.integers().map(str), st.floats().map(repr)),
                 min_size=3, max_size=3),
        max_size=6,
    )
)  # fmt: skip
def test_structured_csv_rows_give_storable_cases_or_a_problem(rows: list[list[str]]) -> None:
    text = "case_id;shape;dtype\n" + "\n".join(";".join(row) for row in rows)
    try:
        cases = npukernelbench.parse_test_cases(text, where="t.csv")
    except ProblemError as error:
        assert str(error).startswith("t.csv")
        return
    assert all(storable(c.params) for c in cases)


# ---------------------------------------------------------------------------------------------
# Python files and files on disk


def test_a_50_mb_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "level1" / "1_Huge.py"
    huge.parent.mkdir()
    with huge.open("wb") as file:
        file.truncate(50 * 1024 * 1024)  # sparse: nothing is written
    found = kernelbench.found_problem(huge, root=tmp_path, scale=1.0)
    assert found.failure == (
        "level1/1_Huge.py: 52428800 bytes is over the limit of 1000000 (KOPE_IMPORT_MAX_FILE_BYTES)"
    )


@pytest.mark.parametrize(
    ("source", "failure"),
    [
        ("x = " + "-" * 100_000 + "1\n", "p.py: not Python the importer can parse"),
        (RELU_PY + "\x00", f"p.py: holds a NUL byte (character {len(RELU_PY)})"),
        (
            RELU_PY + "\nN = " + "9" * 400 + "\n",
            "p.py: size constant N is over 4611686018427387904",
        ),
    ],
)
def test_a_python_file_the_importer_cannot_use_fails_with_its_reason(
    tmp_path: Path, source: str, failure: str
) -> None:
    (tmp_path / "p.py").write_text(source)
    found = kernelbench.found_problem(tmp_path / "p.py", root=tmp_path, scale=0.5)
    assert (found.failure, found.definition) == (failure, None)


def test_control_characters_a_docstring_spells_as_escapes_are_left_out_of_the_description(
    tmp_path: Path,
) -> None:
    source = RELU_PY.replace(
        "class Model(nn.Module):", 'class Model(nn.Module):\n    "a\\0b\\x1bc"'
    )
    (tmp_path / "p.py").write_text(source)
    found = kernelbench.found_problem(tmp_path / "p.py", root=tmp_path, scale=0.5)
    assert found.definition is not None
    assert found.definition.spec.description == "abc"


@FUZZ
@given(st.one_of(NOISE, spliced(RELU_PY)))
def test_a_kernelbench_file_gives_a_definition_a_skip_or_a_failure(
    tmp_path: Path, source: str
) -> None:
    (tmp_path / "p.py").write_text(source)
    found = kernelbench.found_problem(tmp_path / "p.py", root=tmp_path, scale=0.5)
    if found.definition is not None:
        assert storable(found.definition.spec.as_json())
        assert json.dumps(found.definition.reference_source)
    else:
        assert found.failure.startswith("p.py") or found.skip_reason


@FUZZ
@given(st.binary(max_size=200))
def test_any_bytes_read_as_text_or_a_problem_naming_the_file(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "f.py").write_bytes(data)
    try:
        text = read_text(tmp_path / "f.py", root=tmp_path)
    except ProblemError as error:
        assert str(error).startswith("f.py: ")
        return
    assert "\x00" not in text


@FUZZ
@given(st.one_of(NOISE, spliced(RELU_CSV)), st.one_of(NOISE, spliced(RELU_PY)))
def test_an_npukernelbench_folder_gives_a_definition_or_a_failure(
    tmp_path: Path, csv: str, module: str
) -> None:
    validation = tmp_path / "level1" / "activation" / "Relu" / "validation"
    validation.mkdir(parents=True, exist_ok=True)
    (validation / "test_cases.csv").write_text(csv)
    (validation / "module.py").write_text(module)
    (validation / "prepare_inputs.py").write_text("def get_inputs(param, device=None): pass\n")
    [found] = npukernelbench.discover(tmp_path)
    if found.definition is None:
        assert found.failure.startswith("level1/activation/Relu")
    else:
        assert storable(found.definition.spec.as_json())


# ---------------------------------------------------------------------------------------------
# operator.toml


@pytest.mark.parametrize(
    ("old", "new", "complaint"),
    [
        ("order = 10", 'order = 10\ntolerance = "tight"', "'str' object has no attribute 'get'"),
        ("level = 1", "level = inf", "level = inf is not a whole number"),
        ("order = 10", "order = 10\ntolerance = { max_abs = 1" + "0" * 400 + " }",
         "int too large to convert to float"),
        ("order = 10", "order = 10\ntolerance = { max_abs = nan }",
         "tolerances must be positive and finite"),
        ("order = 10", "x = " + "[" * 5000 + "]" * 5000, "not valid TOML: nested too deeply"),
        ("order = 10", "order = 1" + "0" * 5000,
         "not valid TOML: Exceeds the limit \\(4300 digits\\)"),
    ],
)  # fmt: skip
def test_an_operator_toml_that_cannot_be_used_is_a_spec_error(
    old: str, new: str, complaint: str
) -> None:
    with pytest.raises(SpecError, match=f"^operator.toml: .*{complaint}"):
        parse_operator_toml(VECTOR_ADD_TOML.replace(old, new), where="operator.toml")


@FUZZ
@given(st.one_of(NOISE, spliced(VECTOR_ADD_TOML)))
def test_an_operator_toml_gives_a_spec_or_a_spec_error(text: str) -> None:
    try:
        spec = parse_operator_toml(text, where="operator.toml")
    except SpecError as error:
        assert str(error).startswith("operator.toml: ")
        return
    assert isinstance(spec, OperatorSpec)


# ---------------------------------------------------------------------------------------------
# An import of broken problems: a report line each, nothing stored


BROKEN_KERNELBENCH = {
    "level1/1_Deep.py": "x = " + "(" * 300 + ")" * 300,
    "level1/2_Nul.py": RELU_PY + "\x00",
    "level1/3_Huge_size.py": RELU_PY + "\nN = " + "9" * 400 + "\n",
    "level1/4_Not_utf8.py": b"\xff\xfe".decode("latin-1"),
}
BROKEN_CSVS = [
    "case_id;a\n1;" + "x" * 200_000,
    "case_id;a;b\n1;2",
    "case_id;shape\n" + "".join(f"{n};[1]\n" for n in range(10_000)),
    "case_id;a\n1;1e999",
]


def stored_rows() -> list[int]:
    tables = (Operator, OperatorVersion, OperatorCase, StartingKernel)
    return [model.objects.count() for model in tables]


def test_an_import_of_broken_problems_stores_nothing_and_reports_each(
    team: Team, tmp_path: Path
) -> None:
    kb, npu = tmp_path / "kb", tmp_path / "npu"
    for label, text in BROKEN_KERNELBENCH.items():
        (kb / label).parent.mkdir(parents=True, exist_ok=True)
        encoding = "latin-1" if "Not_utf8" in label else "utf-8"
        (kb / label).write_bytes(text.encode(encoding))
    for number, csv in enumerate(BROKEN_CSVS):
        validation = npu / "level1" / "activation" / f"Op{number}" / "validation"
        validation.mkdir(parents=True)
        (validation / "module.py").write_text("class Model:\n    pass\n")
        (validation / "prepare_inputs.py").write_text("def get_inputs(p, device=None): pass\n")
        (validation / "test_cases.csv").write_text(csv)
    before = stored_rows()

    runs = [
        import_execute(
            import_start(
                path=str(folder), fmt=None, scale=1.0, team=team, user=None, restrict=False
            )
        )
        for folder in (kb, npu)
    ]

    assert stored_rows() == before
    for run in runs:
        assert run.status == ImportRun.Status.DONE and run.done == run.total
        assert all(line["outcome"] == "failed" and line["reason"].startswith(line["problem"])
                   and "internal error" not in line["reason"] for line in run.report)  # fmt: skip
    assert [line["problem"] for line in runs[0].report] == sorted(BROKEN_KERNELBENCH)
    assert runs[1].total == len(BROKEN_CSVS)
