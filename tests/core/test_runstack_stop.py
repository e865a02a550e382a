"""`make run`'s stop: every process the stack started is gone when it says "Stopped."."""

from __future__ import annotations

import subprocess
import sys

import psutil
from django.db import ProgrammingError

from apps.workbench.management.commands.runstack import caused_by_ctrl_c, stop_all

# A parent that leaves on SIGTERM at once, and a child of its own that SIGTERM never reaches
# (as a Celery pool process outliving its worker would).
PARENT_WITH_A_CHILD = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""  # the handler comes before the pid is printed: the test's SIGTERM follows at once


def test_stopping_the_stack_also_stops_what_its_processes_started() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT_WITH_A_CHILD], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    grandchild = psutil.Process(int(parent.stdout.readline()))
    stop_all([parent], grace_s=1)
    assert parent.returncode == 0
    assert not grandchild.is_running() or grandchild.status() == psutil.STATUS_ZOMBIE


def rollback_failing_after(interrupt: BaseException | None) -> ProgrammingError:
    """The error a migration's commit raises when `interrupt` cut its query short, as
    Django chains it (a clean connection has no interrupt to chain)."""
    try:
        try:
            if interrupt is not None:
                raise interrupt
            raise ValueError("a column type the database does not know")
        except BaseException as cut_short:
            raise ProgrammingError("can't change 'autocommit' now") from cut_short
    except ProgrammingError as error:
        return error


def test_an_error_that_a_ctrl_c_mid_migration_caused_stops_the_stack_like_ctrl_c() -> None:
    """Seen in CI: Ctrl-C in a migration's commit, then the rollback failed on the connection
    left mid-transaction, and `make run` ended with a traceback instead of "Stopped."."""
    assert caused_by_ctrl_c(KeyboardInterrupt())
    assert caused_by_ctrl_c(rollback_failing_after(KeyboardInterrupt()))
    assert not caused_by_ctrl_c(rollback_failing_after(None))
