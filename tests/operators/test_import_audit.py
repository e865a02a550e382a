"""Imports of folders and problems whose names or paths are longer than what is stored: the
run ends, and what does not fit is refused or reported saying what and where."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from apps.accounts.models import Team
from apps.operators.importing import import_execute, import_start
from apps.operators.models import ImportRun, Suite
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
