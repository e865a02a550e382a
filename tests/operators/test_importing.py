"""Imports of folders and problems whose names or paths are longer than what is stored: the
run ends, and what does not fit is refused or reported saying what and where."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.operators.importers import npukernelbench
from apps.operators.importers.common import ProblemError
from apps.operators.importing import ImportRequestError, import_execute, import_start
from apps.operators.models import ImportRun, Operator, OperatorVersion, Suite
from tests.operators.conftest import SAMPLES

pytestmark = pytest.mark.usefixtures("short_reference_limits")
RELU = SAMPLES / "kernelbench" / "level1" / "1_ReLU.py"


def run_import(path: Path, team: Team) -> ImportRun:
    run = import_start(path=str(path), fmt=None, scale=1.0, team=team, user=None, restrict=False)
    return import_execute(run)


def test_a_folder_with_a_long_name_is_imported_and_its_suite_named_within_bounds(
    team: Team, tmp_path: Path
) -> None:
    folder = tmp_path / ("KernelBench_" + "k" * 190)
    (folder / "level1").mkdir(parents=True)
    shutil.copy(RELU, folder / "level1")

    run = run_import(folder, team)

    run.refresh_from_db()
    assert run.status == ImportRun.Status.DONE and run.finished_at is not None
    [suite] = Suite.objects.filter(team=team)
    assert len(suite.name) <= 200 and suite.name.endswith("… (kernelbench)")
    assert suite.name.startswith("KernelBench_kkk")


def test_a_folder_whose_real_path_is_too_long_to_record_is_refused_with_the_reason(
    team: Team, tmp_path: Path, settings: Any, client_for: Callable[[Role | str], Client]
) -> None:
    """A short link to a deep folder passes the form's 500 characters; the run records the
    resolved path, which must fit as well."""
    settings.KOPE_IMPORT_ROOTS = [tmp_path]
    deep = tmp_path.joinpath(*["d" * 90] * 6)
    (deep / "level1").mkdir(parents=True)
    shutil.copy(RELU, deep / "level1")
    (tmp_path / "short").symlink_to(deep)
    engineer = client_for(Role.ENGINEER)
    length = len(str(deep))
    reason = f"{tmp_path / 'short'} leads to a path of {length} characters; at most 500 are kept"

    page = engineer.post("/t/kernels/imports/new/", {"path": str(tmp_path / "short"), "scale": 1})
    api = engineer.post("/api/teams/kernels/imports", {"path": str(tmp_path / "short")},
                        content_type="application/json")  # fmt: skip

    assert page.status_code == 400 and reason in page.content.decode()
    assert api.status_code == 400 and api.json()["error"]["message"] == reason
    assert not ImportRun.objects.exists()


def test_a_problem_with_a_long_name_is_imported_under_a_name_cut_to_fit(
    team: Team, tmp_path: Path
) -> None:
    (tmp_path / "level1").mkdir()
    shutil.copy(RELU, tmp_path / "level1" / f"1_{'Relu_' * 48}Twice.py")  # 250 characters

    run = run_import(tmp_path, team)

    [line] = run.report
    assert line["outcome"] == "imported", line["reason"]
    version = OperatorVersion.objects.get(operator__slug=line["operator"])
    assert len(version.name) == 200 and version.name.startswith("Relu Relu")
    assert version.name.endswith("…")


def test_a_case_id_longer_than_is_stored_fails_its_operator_naming_line_and_column(
    team: Team, tmp_path: Path
) -> None:
    operator = tmp_path / "level1" / "activation" / "Relu"
    shutil.copytree(SAMPLES / "npukernelbench" / "level1" / "activation" / "Relu", operator)
    csv = operator / "validation" / "test_cases.csv"
    csv.write_text(csv.read_text().replace("\n2;", f"\n{'c' * 101};"))

    run = run_import(tmp_path, team)

    assert [(line["outcome"], line["reason"]) for line in run.report] == [
        ("failed", "level1/activation/Relu/validation/test_cases.csv line 3, column case_id: "
                   "101 characters, over the limit of 100"),
    ]  # fmt: skip
    assert not Operator.objects.filter(team=team).exists()


def test_a_problem_whose_path_is_longer_than_is_stored_fails_naming_it(
    team: Team, tmp_path: Path
) -> None:
    deep = tmp_path.joinpath("level1", *["d" * 100] * 5)
    deep.mkdir(parents=True)
    shutil.copy(RELU, deep)
    label = str((deep / "1_ReLU.py").relative_to(tmp_path))

    run = run_import(tmp_path, team)

    assert [(line["outcome"], line["reason"]) for line in run.report] == [
        ("failed", f"{label}: the path is {len(label)} characters, over the limit of 500"),
    ]
    assert not Operator.objects.filter(team=team).exists()


@pytest.mark.parametrize("fmt", [None, "npukernelbench"])
def test_a_scale_for_npukernelbench_which_has_no_sizes_to_scale_is_refused(
    team: Team, fmt: str | None
) -> None:
    """Its cases state their sizes; the run would read 'sizes scaled by 0.5' with none scaled."""
    with pytest.raises(ImportRequestError) as refused:
        import_start(path=str(SAMPLES / "npukernelbench"), fmt=fmt, scale=0.5, team=team,
                     user=None, restrict=False)  # fmt: skip

    assert refused.value.message == (
        "scale 0.5 applies to KernelBench problems only; NPUKernelBench cases state their sizes"
    )
    assert not ImportRun.objects.exists()


def test_a_format_whose_layout_the_folder_lacks_is_refused_saying_so(team: Team) -> None:
    """Else the run found nothing and ended 'Done: 0 imported, 0 unchanged, 0 skipped, 0
    failed', with no word of why."""
    folder = SAMPLES / "kernelbench"

    with pytest.raises(ImportRequestError) as refused:
        import_start(path=str(folder), fmt="npukernelbench", scale=1.0, team=team, user=None,
                     restrict=False)  # fmt: skip

    assert refused.value.message == (
        f"{folder} holds no NPUKernelBench operators (validation/module.py)"
    )
    assert not ImportRun.objects.exists()


@pytest.mark.parametrize(
    ("header", "column"), [("case_id;shape;shape", "shape"), ("case_id;shape;case_id", "case_id")]
)
def test_a_csv_column_named_twice_fails_its_operator_instead_of_losing_one(
    header: str, column: str
) -> None:
    """The second column's values silently replaced the first's in every case."""
    with pytest.raises(ProblemError) as refused:
        npukernelbench.parse_test_cases(f"{header}\n1;[4];[8]\n", where="t.csv")

    assert str(refused.value) == f"t.csv line 1: column {column!r} appears more than once"


def test_a_scale_refused_on_the_import_form_is_said_under_the_scale(
    team: Team, settings: Any, client_for: Callable[[Role | str], Client]
) -> None:
    settings.KOPE_IMPORT_ROOTS = [SAMPLES]
    form = {"path": str(SAMPLES / "npukernelbench"), "scale": "0.5"}

    page = client_for(Role.ENGINEER).post("/t/kernels/imports/new/", form)

    text = page.content.decode()
    assert page.status_code == 400
    errors = text[text.index('id="id_scale_error"') :]
    assert "scale 0.5 applies to KernelBench problems only" in errors[: errors.index("</ul>")]


@pytest.mark.parametrize("broken", ["4_Raises.py", "3_Broken_syntax.py"])
def test_a_problem_that_fails_on_a_new_import_keeps_its_operator_in_the_suite(
    team: Team, tmp_path: Path, broken: str
) -> None:
    """Its stored versions are unchanged (a failed problem stores nothing); the suite dropped
    it, and a session on the suite no longer ran it (a reference that timed out once did it)."""
    level = tmp_path / "level1"
    level.mkdir()
    for name in ("1_ReLU.py", "2_Matmul_with_init.py"):
        shutil.copy(SAMPLES / "kernelbench" / "level1" / name, level)
    run_import(tmp_path, team)
    shutil.copy(SAMPLES / "kernelbench" / "level1" / broken, level / "2_Matmul_with_init.py")

    again = run_import(tmp_path, team)

    assert [line["outcome"] for line in again.report] == ["unchanged", "failed"]
    suite = Suite.objects.get(team=team)
    assert [e.operator.slug for e in suite.entries.all()] == [
        "kb_l1_1_relu", "kb_l1_2_matmul_with_init"]  # fmt: skip


def test_a_misspelt_import_field_is_a_422_naming_it_not_a_default(
    team: Team, settings: Any, client_for: Callable[[Role | str], Client]
) -> None:
    """{"Scale": 0.1} imported at scale 1: GPU-scale sizes on the CPU."""
    settings.KOPE_IMPORT_ROOTS = [SAMPLES]
    body = {"path": str(SAMPLES / "kernelbench" / "level2"), "Scale": 0.1}

    started = client_for(Role.ENGINEER).post("/api/teams/kernels/imports", body,
                                             content_type="application/json")  # fmt: skip

    assert started.status_code == 422
    [detail] = started.json()["error"]["details"]
    assert detail["loc"][-1] == "Scale" and detail["type"] == "extra_forbidden"
    assert not ImportRun.objects.exists()
