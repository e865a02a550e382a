"""Child processes for the sandbox tests: a fresh interpreter, confined by confine_child in its
preexec_fn, that runs a snippet and prints what each attempt came to. A seccomp filter is
only ever installed in such a child, never in the pytest process."""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from apps.sandbox.jail import Limits, confine_child, sandbox_ids
from apps.sandbox.landlock import Files
from apps.sandbox.seccomp import Profile

REPO_ROOT = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
# processes counts every task of `nobody` on the host, so it keeps the default's headroom.
TEST_LIMITS = Limits(cpu_s=10, memory_mb=1024, open_files=64, processes=256, file_size_mb=16)

# Every child starts with this; `attempt` prints an outcome the tests can compare, `raw` makes
# a system call by number (glibc's wrappers may hide a refusal in their return value).
CHILD_PRELUDE = """\
import ctypes, errno, os, resource, signal, socket, subprocess, sys, threading
from apps.sandbox import seccomp
from apps.sandbox.seccomp import Profile

libc = ctypes.CDLL(None, use_errno=True)

def attempt(action):
    try:
        action()
    except OSError as error:
        return errno.errorcode[error.errno]
    return "ok"

def raw(number, *args):
    result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    if result == -1:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result
"""


def _runnable_by_anyone(path: str) -> bool:
    real = Path(os.path.realpath(path))
    return all(p.stat().st_mode & stat.S_IXOTH for p in [real, *real.parents])


def _child_python() -> str | None:
    """As root the child runs as `nobody`, who must be able to exec the interpreter. The
    venv's python resolves into /root/.pyenv here, and /root is 0700, so fall back to the
    system python3 (apps/sandbox needs only the standard library)."""
    if not IS_ROOT:
        return sys.executable
    candidates = [sys.executable, shutil.which("python3", path="/usr/bin:/bin")]
    return next((c for c in candidates if c and _runnable_by_anyone(c)), None)


CHILD_PYTHON = _child_python()
needs_child_python = pytest.mark.skipif(
    CHILD_PYTHON is None, reason="no python interpreter the sandbox user can execute"
)
needs_root = pytest.mark.skipif(not IS_ROOT, reason="only root switches to the sandbox user")


def run_confined(
    code: str, limits: Limits | None, workdir: Path, *, filtered: Profile | None = None,
    files: Files | None = None, launch_filter: Profile | None = None, timeout: float = 20,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run `code` in a child confined by confine_child(limits, workdir, files, launch_filter)
    (limits None: not confined), after it installs the `filtered` profile itself when given
    (as the harness does once it has set up)."""
    assert CHILD_PYTHON is not None
    install = "" if filtered is None else f"seccomp.install({filtered!r})\n"
    source = CHILD_PRELUDE + install + textwrap.dedent(code)
    preexec = (
        None
        if limits is None
        else functools.partial(confine_child, limits, str(workdir), files, launch_filter)
    )
    return subprocess.run(
        [CHILD_PYTHON, "-c", source],
        cwd=workdir if limits is None else "/",  # confined, confine_child must get there itself
        env={"PYTHONPATH": str(REPO_ROOT), "PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"},
        preexec_fn=preexec,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def output_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def with_files(workdir: Path) -> Path:
    """What the file-system cases act on, owned by the user the child runs as."""
    for name in ["readable.txt", "doomed.txt"]:
        (workdir / name).write_text("hello\n")
        give_to_sandbox_user(workdir / name)
    (workdir / "empty_dir").mkdir()
    give_to_sandbox_user(workdir / "empty_dir")
    return workdir


def give_to_sandbox_user(path: Path) -> None:
    if IS_ROOT:
        uid, gid = sandbox_ids()
        os.chown(path, uid, gid)


def own_network_namespace() -> str:
    return os.readlink("/proc/self/ns/net")
