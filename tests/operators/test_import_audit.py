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
