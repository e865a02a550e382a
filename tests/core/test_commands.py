"""The management commands meet a database migrate never ran on, and settings out of bounds,
with what was wrong, not a traceback from deep inside."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from pytest_django import DjangoDbBlocker

from apps.benchmarks.web import drop_database
from apps.core.kernel_input import MAX_SOURCE_BYTES
from apps.devices.models import Evaluation
from tests.factories import stored_builtin
from tests.workbench.test_live_events import process_env

RELU_KERNEL = Path("apps/operators/builtin/relu/naive.c")
COMMANDS = [
    ["bench", "kernels", "--operators", "relu"],
    ["bench", "retrieval"],
    ["bench", "evaluator", "--quick"],
    ["list_operators"],
    ["load_builtin_suite"],
    ["rebuild_forest"],
    ["evaluate", "relu", str(RELU_KERNEL)],
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


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [
        ("--seeds", "0", "evaluation seeds must be a whole number from 1 to 20, got 0"),
        ("--repeats", "0", "evaluation repeats must be a whole number from 1 to 100000, got 0"),
        ("--warmup", "-1", "evaluation warmup must be a whole number from 0 to 1000, got -1"),
        ("--threads", "0", "evaluation threads must be a whole number from 1 to 1024, got 0"),
        ("--threads", "100000",
         "evaluation threads must be a whole number from 1 to 1024, got 100000"),
    ],
)  # fmt: skip
def test_evaluate_refuses_settings_outside_their_bounds_before_anything_runs(
    db: None, option: str, value: str, reason: str
) -> None:
    """--seeds 0 and --repeats 0 ended in an IndexError and a ValueError from the evaluator;
    --threads 100000 started a child that died of SIGSEGV."""
    stored_builtin("relu")
    with pytest.raises(CommandError, match=f"^{reason}$"):
        call_command("evaluate", "relu", str(RELU_KERNEL), option, value, stdout=StringIO())
    assert not Evaluation.objects.exists()


def test_rebuild_forest_names_a_session_that_does_not_exist(db: None) -> None:
    """It used to answer "Rebuilt 0 cases from the journal." as if all were well."""
    with pytest.raises(CommandError, match=r"^--session 99999: no session has that id$"):
        call_command("rebuild_forest", "--session", "99999", stdout=StringIO())


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (["kernels", "--rounds", "0"], "--rounds must be at least 1"),
        (["kernels", "--timed-calls", "2"], "--timed-calls must be from 3 to 100000"),
        (["kernels", "--timed-calls", "100001"], "--timed-calls must be from 3 to 100000"),
        (["retrieval", "--cases", "-1"], "--cases must be at least 1"),
        (["evaluator", "--repeats", "1"],
         "--repeats must be at least 2: the spread compares evaluations"),
        (["kernels", "--operators", ","], "--operators names no operator"),
        (["kernels", "--operators", ""], "--operators names no operator"),
    ],
)  # fmt: skip
def test_bench_refuses_options_outside_their_bounds(arguments: list[str], reason: str) -> None:
    """`--cases -1` used to run, a --timed-calls past the evaluator's bound failed deep
    inside the run, and an `--operators` that named none ran the whole suite."""
    with pytest.raises(CommandError, match=f"^{reason}$"):
        call_command("bench", *arguments, stdout=StringIO(), stderr=StringIO())


@pytest.mark.parametrize("under", ["", "folder"])
def test_bench_kernels_refuses_an_out_folder_it_cannot_write_before_it_runs(
    tmp_path: Path, under: str
) -> None:
    """It used to run every session first and then end in a FileExistsError or
    NotADirectoryError traceback, the tables lost."""
    taken = tmp_path / "a-file"
    taken.write_text("")
    out = taken / under if under else taken
    with pytest.raises(CommandError, match=f"^--out {out}: not a folder it can write to: "):
        call_command("bench", "kernels", "--operators", "relu", "--out", str(out),
                     stdout=StringIO(), stderr=StringIO())  # fmt: skip


def test_evaluate_reads_no_more_of_a_kernel_file_than_the_limit(db: None) -> None:
    """`evaluate relu /dev/zero` read forever."""
    stored_builtin("relu")
    reason = f"/dev/zero is over the kernel limit of {MAX_SOURCE_BYTES} bytes"
    with pytest.raises(CommandError, match=f"^{reason}$"):
        call_command("evaluate", "relu", "/dev/zero", stdout=StringIO())
    assert not Evaluation.objects.exists()
