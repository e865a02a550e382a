"""`make run`'s stop: every process the stack started is gone when it says "Stopped."."""

from __future__ import annotations

import subprocess
import sys

import psutil

from apps.core.management.commands.runstack import stop_all

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
