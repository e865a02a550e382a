"""The parent-death signal: set in a child, refused where the parent is already gone. (That
the child then dies with its worker is shown on real workers: tests/devices/
test_device_worker_kill.py and tests/operators/test_import_worker_death.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings

CHILD = """
import sys
from apps.core.parent_death import die_with_parent
try:
    die_with_parent(int(sys.argv[1]))
except OSError as error:
    print(error)
    sys.exit(3)
print("set")
"""


def in_a_child(parent: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, parent], cwd=settings.BASE_DIR,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_it_is_set_while_the_parent_lives() -> None:
    child = in_a_child(str(os.getpid()))
    assert (child.returncode, child.stdout) == (0, "set\n"), child.stderr


def test_a_child_whose_parent_already_ended_is_told_so() -> None:
    """A parent that died between the fork and the setting would never send the signal: the
    child must not go on as if it would."""
    child = in_a_child("999999999")
    assert (child.returncode, child.stdout) == (
        3, "the process that started this one (999999999) has already ended\n"
    ), child.stderr  # fmt: skip
