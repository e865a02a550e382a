"""`manage.py bench suite PATH`: a small KernelBench folder imported, lowered to starting
kernels, optimized by the offline policy and reported, in one command."""

from __future__ import annotations

import json
import shutil
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from apps.memory.models import Case
from apps.operators.models import OperatorVersion
from tests.operators.conftest import SAMPLES

FIGURES = {"problems", "imported_fraction", "lowered_fraction", "start_correct_fraction",
           "pass_rate", "median_self_acceleration", "median_self_acceleration_of_passing",
           "fraction_faster_than_reference", "fraction_of_passing_faster_than_reference",
           "geomean_speedup_vs_naive", "rounds_used"}  # fmt: skip


@pytest.fixture
def small_suite(tmp_path: Path) -> Path:
    """One problem that imports and one that cannot (a syntax error), as in a checkout."""
    level = tmp_path / "level1"
    level.mkdir()
    for name in ("1_ReLU.py", "3_Broken_syntax.py"):
        shutil.copy(SAMPLES / "kernelbench/level1" / name, level)
    return tmp_path


def test_the_suite_benchmark_imports_lowers_optimizes_and_reports(
    transactional_db: None, small_suite: Path
) -> None:
    out, progress = StringIO(), StringIO()

    call_command("bench", "suite", str(small_suite), "--scale", "0.5", "--rounds", "2",
                 "--timed-calls", "3", "--json", stdout=out, stderr=progress)  # fmt: skip

    report = json.loads(out.getvalue())
    assert set(report) >= FIGURES
    rows = {row["problem"]: row for row in report["operators"]}
    relu, broken = rows["level1/1_ReLU.py"], rows["level1/3_Broken_syntax.py"]
    assert (broken["imported"], broken["lowered"], broken["correct"]) == (False, False, False)
    assert "syntax error" in broken["import_note"]
    assert (relu["imported"], relu["lowered"], relu["start_correct"]) == (True, True, True)
    assert relu["correct"] is True and relu["rounds_used"] == 2
    assert relu["speedup_vs_naive"] > 0 and relu["speedup_vs_reference"] > 0
    assert report["problems"] == 2 and report["imported_fraction"] == 0.5
    assert report["lowered_fraction"] == 0.5 and report["pass_rate"] == 0.5
    start = Case.objects.filter(session_id=report["session"]).order_by("iteration").first()
    version = OperatorVersion.objects.get(operator__team__slug=report["team"])
    assert start is not None and start.iteration == 0
    assert start.source is not None
    assert start.source.text == version.starting_kernels.get(target="cpu-c").source
    assert "import 2/2" in progress.getvalue()


def test_the_suite_benchmark_needs_a_folder(db: None) -> None:
    with pytest.raises(CommandError, match=r"bench suite needs the folder to import"):
        call_command("bench", "suite", "--json", stdout=StringIO())


def test_a_folder_that_is_not_a_suite_is_refused_saying_why(db: None, tmp_path: Path) -> None:
    refused = r"^path: .* holds neither NPUKernelBench .* nor KernelBench"
    with pytest.raises(CommandError, match=refused):
        call_command("bench", "suite", str(tmp_path), "--json", stdout=StringIO())
