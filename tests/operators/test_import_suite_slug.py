"""The suite an import makes is its folder's: another folder of the same name (kb-v1/level1,
kb-v2/level1) gets a suite of its own, and never takes over the first one's, which sessions
launch by its slug."""

from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path

import pytest
from django.apps import apps as django_apps

from apps.accounts.models import Team
from apps.operators.importing import import_execute, import_start
from apps.operators.models import ImportRun, Suite
from apps.runs.services import suite_operators
from tests.operators.conftest import SAMPLES

pytestmark = pytest.mark.usefixtures("short_reference_limits")
LEVEL1 = SAMPLES / "kernelbench" / "level1"
RELU, MATMUL = "kb_l1_1_relu", "kb_l1_2_matmul_with_init"
SUITE_SOURCE = importlib.import_module("apps.operators.migrations.0002_suite_source")


def level1_of(root: Path, problem: str) -> Path:
    """A KernelBench checkout at `root` whose level1 holds one sample problem."""
    folder = root / "level1"
    folder.mkdir(parents=True)
    shutil.copy(LEVEL1 / problem, folder)
    return folder


@pytest.fixture
def two_level1s(tmp_path: Path) -> tuple[Path, Path]:
    """kb-v1/level1 with ReLU and kb-v2/level1 with Matmul."""
    return level1_of(tmp_path / "kb-v1", "1_ReLU.py"), level1_of(
        tmp_path / "kb-v2", "2_Matmul_with_init.py"
    )


def run_import(path: Path, team: Team | None) -> ImportRun:
    run = import_start(path=str(path), fmt=None, scale=1.0, team=team, user=None, restrict=False)
    return import_execute(run)


def held(suite: Suite) -> list[str]:
    return [entry.operator.slug for entry in suite.entries.all()]


def test_a_folder_of_the_same_name_elsewhere_gets_a_suite_of_its_own(
    team: Team, two_level1s: tuple[Path, Path]
) -> None:
    v1, v2 = two_level1s
    run_import(v1, team)

    run_import(v2, team)

    first = Suite.objects.get(team=team, slug="kernelbench-level1")
    assert held(first) == [RELU] and first.source == str(v1)
    second = Suite.objects.get(team=team, source=str(v2))
    assert re.fullmatch(r"kernelbench-level1-[0-9a-f]{8}", second.slug)
    assert held(second) == [MATMUL] and second.description == f"Imported from {v2}."
    assert suite_operators(team, "kernelbench-level1")[0] == [RELU]  # what a launch runs
    assert suite_operators(team, second.slug)[0] == [MATMUL]


def test_each_folder_keeps_its_suite_and_slug_when_imported_again(
    team: Team, two_level1s: tuple[Path, Path]
) -> None:
    v1, v2 = two_level1s
    run_import(v1, team)
    run_import(v2, team)
    before = {suite.source: (suite.pk, suite.slug) for suite in Suite.objects.all()}
    shutil.copy(LEVEL1 / "2_Matmul_with_init.py", v1)

    run_import(v1, team)
    run_import(v2, team)

    assert {suite.source: (suite.pk, suite.slug) for suite in Suite.objects.all()} == before
    assert held(Suite.objects.get(source=str(v1))) == [RELU, MATMUL]
    assert held(Suite.objects.get(source=str(v2))) == [MATMUL]


def test_a_teams_import_leaves_the_shared_suite_of_another_folder_in_sight(
    team: Team, two_level1s: tuple[Path, Path]
) -> None:
    """A team's own suite hides a shared one of its slug; another folder's must not hide it."""
    shared, own = two_level1s
    run_import(shared, None)

    run_import(own, team)

    assert suite_operators(team, "kernelbench-level1")[0] == [RELU]
    [team_suite] = Suite.objects.filter(team=team)
    assert team_suite.slug != "kernelbench-level1" and held(team_suite) == [MATMUL]


def test_a_team_importing_the_shared_suites_folder_gets_its_own_under_the_same_slug(
    team: Team, tmp_path: Path
) -> None:
    folder = level1_of(tmp_path / "kb-v1", "1_ReLU.py")
    run_import(folder, None)

    run_import(folder, team)

    assert Suite.objects.get(team=team).slug == "kernelbench-level1"
    assert Suite.objects.get(team=None).slug == "kernelbench-level1"


@pytest.mark.django_db
def test_suites_imported_before_the_source_was_kept_get_it_from_their_description() -> None:
    imported = Suite.objects.create(
        slug="kernelbench-level1", name="level1 (kernelbench)",
        description="Imported from /data/kb v1./level1.",
    )  # fmt: skip
    builtin = Suite.objects.create(slug="builtin", name="Built-in", description="Shipped.")

    SUITE_SOURCE.sources_from_descriptions(django_apps, None)

    imported.refresh_from_db(), builtin.refresh_from_db()
    assert (imported.source, builtin.source) == ("/data/kb v1./level1", "")


def test_a_suite_imported_before_the_source_was_kept_is_not_taken_over(
    team: Team, two_level1s: tuple[Path, Path]
) -> None:
    v1, v2 = two_level1s
    run_import(v1, team)
    Suite.objects.update(source="")  # as the migration found it
    SUITE_SOURCE.sources_from_descriptions(django_apps, None)

    run_import(v2, team)

    assert held(Suite.objects.get(team=team, slug="kernelbench-level1")) == [RELU]


def test_a_long_folder_name_taken_elsewhere_gets_a_slug_within_bounds(
    team: Team, tmp_path: Path
) -> None:
    name = "KernelBench_" + "k" * 190
    run_import(level1_of(tmp_path / "a" / name, "1_ReLU.py").parent, team)

    run_import(level1_of(tmp_path / "b" / name, "1_ReLU.py").parent, team)

    slugs = sorted(suite.slug for suite in Suite.objects.filter(team=team))
    assert [len(slug) for slug in slugs] == [64, 64] and slugs[0] != slugs[1]


def test_a_shared_import_is_not_hidden_behind_a_teams_suite_of_another_folder(
    team: Team, other_team: Team, two_level1s: tuple[Path, Path]
) -> None:
    """A team's own suite hides a shared one of its slug, so a shared import of another
    folder takes a slug of its own, which that team can launch too."""
    own, shared = two_level1s
    run_import(own, team)

    run_import(shared, None)

    [shared_suite] = Suite.objects.filter(team=None)
    assert suite_operators(team, shared_suite.slug)[0] == [MATMUL]
    assert suite_operators(other_team, shared_suite.slug)[0] == [MATMUL]
    assert suite_operators(team, "kernelbench-level1")[0] == [RELU]
