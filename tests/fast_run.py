"""`make test-fast`: the tests that need no database and start no process, for the edit-test
loop (`pytest --fast`). A test that asks for the database is deselected; one that would start a
process (a subprocess, a fork, a posix_spawn) is skipped at that moment, in the test or in its
fixtures, so the fast run never starts one and needs no list kept by hand. `make test` runs
everything."""

from __future__ import annotations

import os
import subprocess
from typing import Any, NoReturn

import pytest

# Those a test asks for to reach the database (pytest-django's autouse fixtures depend on
# django_db_blocker in every test, so it says nothing; a test unblocking with it starts the
# embedded server, a process, and is skipped there).
DATABASE_FIXTURES = frozenset({
    "db", "transactional_db", "live_server", "django_db_reset_sequences",
    "django_db_serialized_rollback",
})  # fmt: skip
PROCESS_STARTS = ((subprocess.Popen, "__init__"), (os, "fork"), (os, "forkpty"),
                  (os, "posix_spawn"), (os, "posix_spawnp"), (os, "system"))  # fmt: skip


def fast_run(config: pytest.Config) -> bool:
    return bool(config.getoption("--fast"))


def left_to_the_whole_suite(item: pytest.Item) -> bool:
    """It asks for the database, or drives Chromium (a process, started inside Playwright's
    event loop, where a skip cannot land cleanly)."""
    fixtures = set(getattr(item, "fixturenames", ()))
    markers = {marker.name for marker in item.iter_markers()}
    return bool(DATABASE_FIXTURES & fixtures) or bool({"django_db", "browser"} & markers)


def without_database_tests(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (dropped if left_to_the_whole_suite(item) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def refuse_to_start_processes(config: pytest.Config) -> None:
    """In the process that runs the tests: not in pytest-xdist's controller, which starts the
    workers with a subprocess of its own."""
    distributed_controller = config.getoption("numprocesses", None) and not hasattr(
        config, "workerinput"
    )
    if distributed_controller:
        return
    for owner, name in PROCESS_STARTS:
        setattr(owner, name, process_refused)


def process_refused(*_args: Any, **_kwargs: Any) -> NoReturn:
    pytest.skip(
        "starts a process: left to `make test` (not in `make test-fast`)", allow_module_level=True
    )  # one that starts a process as it is imported
