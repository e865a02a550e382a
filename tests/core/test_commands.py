"""Every command that reads the project's tables says what to do on a database that
`manage.py migrate` never ran on, rather than printing a traceback from deep inside."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from pytest_django import DjangoDbBlocker

from apps.workbench.bench import drop_database
from tests.workbench.test_live_events import process_env

COMMANDS = [
    ["bench", "kernels", "--operators", "relu"],
    ["bench", "retrieval"],
    ["list_operators"],
    ["load_builtin_suite"],
    ["rebuild_forest"],
    ["evaluate", "relu", "manage.py"],
    ["import_suite", "apps/operators/builtin"],
]


@pytest.fixture(scope="module")
def unmigrated_database(django_db_blocker: DjangoDbBlocker) -> Iterator[str]:
    empty = f"kope_unmigrated_{uuid.uuid4().hex[:8]}"  # the embedded server makes it on start
    yield empty
    with django_db_blocker.unblock():
        drop_database(empty)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_database_migrate_never_ran_on_is_named_with_what_to_do(
    db: None, unmigrated_database: str, command: list[str]
) -> None:
    env = process_env("single-machine") | {"KOPE_DB_NAME": unmigrated_database}
    run = subprocess.run([sys.executable, "manage.py", *command], env=env, capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"the database {unmigrated_database} lacks" in run.stderr
    assert "run manage.py migrate first" in run.stderr
    assert "Traceback" not in run.stderr
