"""Importing the two public layouts from small sample problems written for these tests.

The samples (tests/operators/samples/) hold good problems and broken ones: a syntax error, a
reference that raises, one that hangs, one that allocates a tebibyte, a missing function, a
CSV with a missing column, a short row, an unknown dtype. Each reference runs in the
sandboxed child; the report names every problem's outcome and reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from apps.accounts.models import Team
from apps.operators.importing import ImportRequestError, import_execute, import_start, summary
from apps.operators.models import ImportRun, Operator, OperatorVersion, Suite
from tests.operators.conftest import SAMPLES

pytestmark = pytest.mark.usefixtures("short_reference_limits")


def run_import(path: Path, team: Team, *, scale: float = 1.0) -> ImportRun:
    run = import_start(path=str(path), fmt=None, scale=scale, team=team, user=None, restrict=False)
    return import_execute(run)


def outcomes(run: ImportRun) -> dict[str, tuple[str, str]]:
    return {line["problem"]: (line["outcome"], line["reason"]) for line in run.report}


def test_kernelbench_problems_are_imported_or_reported_with_the_reason(team: Team) -> None:
    run = run_import(SAMPLES / "kernelbench", team, scale=0.5)

    assert run.format == "kernelbench" and run.status == "done" and run.done == run.total == 13
    report = outcomes(run)
    assert report["level1/1_ReLU.py"] == ("imported", "")
    assert report["level1/2_Matmul_with_init.py"] == ("imported", "")
    assert report["level2/12_Gemm_Bias_ReLU.py"] == ("imported", "")
    assert report["level1/helpers.py"] == ("skipped", "not a KernelBench problem (no class Model)")
    assert report["level1/3_Broken_syntax.py"] == (
        "failed", "level1/3_Broken_syntax.py line 6: syntax error: expected ':'")  # fmt: skip
    assert report["level1/4_Raises.py"] == (
        "failed",
        "case default: ValueError: this reference is broken on purpose (the problem file line 7)",
    )
    assert report["level1/5_Hangs.py"] == ("failed", "the reference did not finish within 10 s")
    assert report["level1/6_Greedy.py"][0] == "failed"
    assert "ran out of memory" in report["level1/6_Greedy.py"][1]
    assert report["level1/7_No_get_inputs.py"] == (
        "failed", "level1/7_No_get_inputs.py: defines no get_inputs, get_init_inputs")  # fmt: skip
    # The problems whose sizes constrain each other (test_real_suite_scaling.py) import too.
    assert summary(run) == {"imported": 7, "unchanged": 0, "skipped": 1, "failed": 5}

    # Nothing of a failed problem is stored.
    assert sorted(Operator.objects.filter(team=team).values_list("slug", flat=True)) == [
        "kb_l1_10_hinge_loss", "kb_l1_11_conv_dilated", "kb_l1_1_relu",
        "kb_l1_2_matmul_with_init", "kb_l1_8_conv_groups", "kb_l1_9_max_pool_wide_window",
        "kb_l2_12_gemm_bias_relu"]  # fmt: skip


def test_kernelbench_sizes_are_scaled_and_the_scale_recorded(team: Team) -> None:
    run_import(SAMPLES / "kernelbench" / "level1", team, scale=0.25)

    matmul = OperatorVersion.objects.get(operator__slug="kb_l1_2_matmul_with_init")
    assert matmul.scale == 0.25 and matmul.level == 1 and matmul.operator.family == "matmul"
    case, *derived = matmul.cases.all()
    assert case.params == {"batch_size": 32, "in_features": 1024, "out_features": 512}
    # The linear layer's weight and bias come after the problem's own input: a kernel gets
    # nothing but its inputs, and a derived case's weights have another shape.
    assert case.inputs == [{"shape": [32, 1024], "dtype": "float32"},
                           {"shape": [512, 1024], "dtype": "float32"},
                           {"shape": [512], "dtype": "float32"}]  # fmt: skip
    assert case.outputs == [{"shape": [32, 512], "dtype": "float32"}]
    assert case.dtype == "float32" and case.timing and case.unsupported_targets == []
    # The smaller and odd-sized cases the import derives make the shapes differ per case.
    assert [c.case_id for c in derived] == ["derived-small", "derived-odd"]
    assert matmul.spec["outputs"] == [{"name": "y0", "dtype": "float32", "shape": ["*", "*"]}]
    relu = OperatorVersion.objects.get(operator__slug="kb_l1_1_relu")
    assert relu.operator.family == "activation"
    assert relu.description == "Simple model that performs a ReLU activation."


def test_npukernelbench_operators_are_imported_or_reported_with_file_and_line(team: Team) -> None:
    run = run_import(SAMPLES / "npukernelbench", team)

    assert run.format == "npukernelbench"
    report = outcomes(run)
    # Its float16 and bfloat16 rows run as float32 (test_real_suite_rows.py): cpu-c holds them.
    assert report["level1/activation/Relu"] == (
        "imported", "case 4 runs as float32 (row says float16); case 5 runs as float32 (row "
        "says bfloat16)")  # fmt: skip
    assert report["level1/reduce/SumDim"] == ("imported", "")
    assert report["level2/norm/RmsNorm"] == ("imported", "")
    broken = "level1/broken"
    assert report[f"{broken}/MissingCaseId"] == (
        "failed", f"{broken}/MissingCaseId/validation/test_cases.csv line 1: no case_id "
        "column (columns: id, shape, dtype)")  # fmt: skip
    assert report[f"{broken}/BadRow"] == (
        "failed", f"{broken}/BadRow/validation/test_cases.csv line 3: 2 values for 3 "
        "columns")  # fmt: skip
    assert report[f"{broken}/UnknownDtype"] == (
        "failed", f"{broken}/UnknownDtype/validation/test_cases.csv line 4, column dtype: "
        "unknown dtype 'float8_e9m9'")  # fmt: skip
    # The rows the reference fails on are left out, saying why; the others are imported.
    assert report[f"{broken}/RaisesOnCase"] == (
        "imported",
        "left out case 3: RuntimeError: 1-D inputs are not handled (validation/module.py line 8)"
        "; left out case 5: RuntimeError: 1-D inputs are not handled (validation/module.py "
        "line 8); case 4 runs as float32 (row says float16)",
    )
    assert Operator.objects.filter(team=team).count() == 7


def test_npukernelbench_cases_keep_their_parameters_dtypes_and_unsupported_targets(
    team: Team,
) -> None:
    run_import(SAMPLES / "npukernelbench" / "level1" / "activation", team)

    relu = OperatorVersion.objects.get(operator__slug="npu_l1_relu")
    assert relu.description.startswith("# Relu")
    assert relu.operator.family == "activation"
    cases = {c.case_id: c for c in relu.cases.all()}
    # The row as the suite's runner gives it (pandas): numbers typed, the rest text.
    assert cases["1"].params == {"case_id": 1, "shape": "[128, 256]", "dtype": "float32"}
    assert cases["4"].params == {"case_id": 4, "shape": "[33, 65, 3]", "dtype": "float16",
                                 "run_as": "float32 (row says float16)"}  # fmt: skip
    assert cases["4"].outputs == [{"shape": [33, 65, 3], "dtype": "float32"}]
    assert [c.dtype for c in cases.values()] == ["float32"] * 5
    assert all(c.unsupported_targets == [] for c in cases.values())
    # Different shapes per case:
    assert relu.spec["inputs"] == [{"name": "x0", "dtype": "float32", "shape": ["*", "*"]}]


def test_a_scalar_input_becomes_an_attribute(team: Team) -> None:
    run_import(SAMPLES / "npukernelbench" / "level1" / "reduce", team)

    version = OperatorVersion.objects.get(operator__slug="npu_l1_sum_dim")
    assert version.spec["attributes"] == [{"name": "a1", "type": "int", "default": 1}]
    assert [c.outputs[0]["shape"] for c in version.cases.all()] == [[4], [3]]


def test_importing_the_same_folder_twice_changes_nothing(team: Team) -> None:
    first = run_import(SAMPLES / "npukernelbench" / "level2", team)
    second = run_import(SAMPLES / "npukernelbench" / "level2", team)

    assert summary(first)["imported"] == 1
    assert summary(second) == {"imported": 0, "unchanged": 1, "skipped": 0, "failed": 0}
    assert OperatorVersion.objects.filter(operator__team=team).count() == 1
    suite = Suite.objects.get(team=team)
    assert [e.operator.slug for e in suite.entries.all()] == ["npu_l2_rms_norm"]


def test_a_changed_problem_is_imported_as_a_new_version(team: Team, samples_copy: Path) -> None:
    folder = samples_copy / "npukernelbench" / "level2"
    run_import(folder, team)
    csv = folder / "norm" / "RmsNorm" / "validation" / "test_cases.csv"
    csv.write_text(csv.read_text() + "4;2;3;1e-6\n")

    run = run_import(folder, team)

    assert [(line["outcome"], line["version"]) for line in run.report] == [("imported", 2)]
    versions = OperatorVersion.objects.filter(operator__slug="npu_l2_rms_norm").order_by("number")
    assert [v.cases.count() for v in versions] == [3, 4]


def test_an_import_makes_a_suite_in_level_order(team: Team) -> None:
    run_import(SAMPLES / "npukernelbench", team)
    suite = Suite.objects.get(team=team, slug="npukernelbench-npukernelbench")
    assert [e.operator.slug for e in suite.entries.all()] == [
        "npu_l1_relu", "npu_l1_raises_on_case", "npu_l1_abs", "npu_l1_complex_norm",
        "npu_l1_mul_sigmoid", "npu_l1_sum_dim", "npu_l2_rms_norm"]  # fmt: skip


def test_a_csv_over_the_case_limit_is_refused(team: Team, samples_copy: Path, settings) -> None:  # type: ignore[no-untyped-def]
    settings.KOPE_IMPORT_MAX_CASES = 3
    folder = samples_copy / "npukernelbench" / "level1" / "activation"
    run = run_import(folder, team)
    assert outcomes(run)["Relu"] == (
        "failed", "Relu/validation/test_cases.csv: 5 cases, over the limit of 3 "
        "(KOPE_IMPORT_MAX_CASES)")  # fmt: skip


def test_a_browser_import_may_only_read_under_the_import_roots(
    team: Team,
    settings,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    settings.KOPE_IMPORT_ROOTS = [tmp_path]
    with pytest.raises(ImportRequestError, match="outside the import roots"):
        import_start(path=str(SAMPLES), fmt=None, scale=1.0, team=team, user=None)
    with pytest.raises(ImportRequestError, match="is not a folder"):
        import_start(path=str(tmp_path / "missing"), fmt=None, scale=1.0, team=team, user=None)
    with pytest.raises(ImportRequestError, match="not a usable path: File name too long"):
        import_start(path=str(tmp_path / ("x" * 300)), fmt=None, scale=1.0, team=team, user=None)
    with pytest.raises(ImportRequestError, match="not a usable path: embedded null byte"):
        import_start(path=f"{tmp_path}/a\0b", fmt=None, scale=1.0, team=team, user=None)
    with pytest.raises(ImportRequestError, match="neither NPUKernelBench"):
        import_start(path=str(tmp_path), fmt=None, scale=1.0, team=team, user=None)
    with pytest.raises(ImportRequestError, match="scale 2 must be"):
        import_start(path=str(SAMPLES), fmt=None, scale=2, team=team, user=None, restrict=False)


def test_the_command_prints_a_report_per_problem(
    team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(CommandError, match=r"^3 problem\(s\) failed: exit status 1$"):
        call_command(
            "import_suite", str(SAMPLES / "npukernelbench" / "level1" / "broken"), "--team",
            team.slug,
        )  # fmt: skip

    out = capsys.readouterr().out
    assert (
        "failed    BadRow: BadRow/validation/test_cases.csv line 3: 2 values for 3 columns" in out
    )
    assert "imported  npu_l1_raises_on_case v1 (RaisesOnCase): left out case 3: RuntimeError" in out
    assert out.strip().endswith("1 imported, 0 unchanged, 0 skipped, 3 failed")


def test_a_reader_that_fails_unexpectedly_ends_the_run_failed_with_the_reason(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in a layout's reader (injected here) is the run's error, never a run left
    "running" forever."""
    from apps.operators.importers import npukernelbench

    def broken(root: Path) -> list[object]:
        raise KeyError("level")

    monkeypatch.setattr(npukernelbench, "discover", broken)
    run = run_import(SAMPLES / "npukernelbench", team)

    run.refresh_from_db()
    assert run.status == ImportRun.Status.FAILED and run.finished_at is not None
    assert run.error == (f"could not list the problems in {SAMPLES / 'npukernelbench'}: "
                         "KeyError: 'level'")  # fmt: skip
    assert run.report == [] and not Operator.objects.filter(team=team).exists()


@pytest.mark.parametrize("scalar", ["float('inf')", "float('nan')"])
def test_a_scalar_input_with_no_finite_value_fails_its_problem_saying_which(
    team: Team, tmp_path: Path, scalar: str
) -> None:
    level = tmp_path / "level1"
    level.mkdir()
    (level / "1_Scale.py").write_text(
        (SAMPLES / "kernelbench" / "level1" / "1_ReLU.py").read_text()
        .replace("def forward(self, x: torch.Tensor)", "def forward(self, x: torch.Tensor, s)")
        .replace("return [x]", f"return [x, {scalar}]")
    )  # fmt: skip

    run = run_import(tmp_path, team)

    [(outcome, reason)] = outcomes(run).values()
    assert outcome == "failed"
    value = scalar[7:10]
    assert reason == (f"case default: input 1 of the reference is the scalar {value}; a scalar "
                      "input becomes an attribute, which must be finite")  # fmt: skip
    assert not Operator.objects.filter(team=team).exists()
