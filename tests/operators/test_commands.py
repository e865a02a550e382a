"""`manage.py load_builtin_suite`, `import_suite` and `list_operators` as an engineer uses them:
a failure mid-way leaves nothing half-written, bad options are named."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from apps.operators import builtin_suite
from apps.operators.management.commands.import_suite import stopped
from apps.operators.models import ImportRun, Operator, Suite
from tests.factories import TeamFactory, stored_builtin
from tests.interrupts import command_caught_mid_query
from tests.processes import as_a_terminal_starts_it, wait_until
from tests.workbench.test_live_events import process_env

# A problem whose reference takes a moment, so Ctrl-C comes with most of the folder to go.
SLOW_PROBLEM = """import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        time.sleep(0.5)
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""


def test_load_builtin_suite_that_fails_on_one_operator_stores_none(
    db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It stored every operator before the broken one and no suite, so the shared operators
    no longer matched the suite (a new version of some, the old of the rest), and said
    "stored" of each."""
    for slug in ("relu", "sigmoid"):  # relu is stored first (order 20, then 40)
        shutil.copytree(builtin_suite.BUILTIN_DIR / slug, tmp_path / slug)
    (tmp_path / "sigmoid" / "reference.py").write_text("def make_inputs(:\n")
    monkeypatch.setattr(builtin_suite, "BUILTIN_DIR", tmp_path)

    out = StringIO()
    with pytest.raises(
        CommandError, match=r"^built-in operator sigmoid: .*\(nothing was stored\)$"
    ):
        call_command("load_builtin_suite", stdout=out)

    assert "stored" not in out.getvalue()  # relu was never "stored": it was rolled back
    assert not Operator.objects.exists()
    assert not Suite.objects.exists()


def test_import_suite_stopped_by_ctrl_c_ends_failed_saying_where(
    transactional_db: None, tmp_path: Path
) -> None:
    """Ctrl-C printed a KeyboardInterrupt traceback and left the run "running" with no process
    on it: its page counted on, and the next agent worker to start took up the import the
    engineer had stopped."""
    for number in range(1, 9):
        (tmp_path / f"{number}_Slow_{number}.py").write_text(SLOW_PROBLEM)
    command = [sys.executable, "manage.py", "import_suite", str(tmp_path)]
    process = subprocess.Popen(command, env=process_env("single-machine"), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=as_a_terminal_starts_it)  # fmt: skip
    try:
        wait_until(lambda: ImportRun.objects.filter(done__gte=1).exists(), 120,
                   "the first problem imported")  # fmt: skip
    finally:
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)

    run = ImportRun.objects.get()
    assert run.status == ImportRun.Status.FAILED and run.finished_at is not None
    assert 1 <= run.done < run.total == 8
    assert run.error == (f"stopped by Ctrl-C after {run.done} of 8 problems (those are kept); "
                         "import the folder again to go on")  # fmt: skip
    # The problems done are stored; one stored as Ctrl-C came may not be counted yet.
    assert run.done <= Operator.objects.count() <= run.done + 1
    assert process.returncode == 1, stdout + stderr
    assert stderr.strip().splitlines()[-1] == f"CommandError: {run.error}"
    assert "Traceback" not in stderr


def test_ctrl_c_during_a_query_still_ends_the_import_failed(transactional_db: None) -> None:
    """Ctrl-C that landed while psycopg was sending a query left the connection "another
    command is already in progress": the run's own "stopped" update failed on it, and the run
    stayed "running"."""
    run = ImportRun.objects.create(path="/suites/mine", format="kernelbench", total=8, done=3)
    command_caught_mid_query()

    with pytest.raises(CommandError, match=r"^stopped by Ctrl-C after 3 of 8 problems"):
        stopped(run)

    run.refresh_from_db()
    assert run.status == ImportRun.Status.FAILED and run.finished_at is not None


def test_list_operators_with_a_team_shows_its_own_operator_in_place_of_the_shared_one(
    db: None,
) -> None:
    """It listed both, two `relu` rows no one could tell apart, though the team's lists, its
    launches and `evaluate --team` use only its own."""
    team = TeamFactory(slug="kernels")
    stored_builtin("relu")
    stored_builtin("sigmoid")
    own = stored_builtin("relu", team=team)
    own.operator.versions.update(name="Our ReLU")
    out = StringIO()

    call_command("list_operators", "--team", "kernels", stdout=out)

    rows = out.getvalue().splitlines()[1:]
    assert [row.split()[0] for row in rows[:-1]] == ["relu", "sigmoid"]
    assert rows[0].endswith("  Our ReLU") and rows[-1] == "2 operators"


def test_import_suite_exits_1_after_the_report_when_a_problem_failed(
    transactional_db: None, tmp_path: Path
) -> None:
    """It exited 0 with failed problems in its report, so a script went on as if all were
    imported; skipped and unchanged problems are no failure."""
    (tmp_path / "1_Relu.py").write_text(SLOW_PROBLEM.replace("time.sleep(0.5)", "pass"))
    (tmp_path / "helpers.py").write_text("SIZE = 4\n")  # not a problem: skipped
    (tmp_path / "2_Broken.py").write_text(SLOW_PROBLEM.replace("time.sleep(0.5)", "1 / 0"))
    command = [sys.executable, "manage.py", "import_suite", str(tmp_path)]
    env = process_env("single-machine")
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                         check=False)  # fmt: skip

    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stdout.strip().endswith("1 imported, 0 unchanged, 1 skipped, 1 failed")
    assert ("failed    kb_l1_2_broken (2_Broken.py): case default: ZeroDivisionError: "
            "division by zero (the problem file line 9)\n") in run.stdout  # fmt: skip
    assert run.stderr.strip().splitlines()[-1] == "CommandError: 1 problem(s) failed: exit status 1"

    (tmp_path / "2_Broken.py").unlink()  # again: relu unchanged, the helper skipped, none failed
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                           check=False)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.strip().endswith("0 imported, 1 unchanged, 1 skipped, 0 failed")
