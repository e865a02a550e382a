"""The judge's folder (the expected outputs) is out of the candidate's reach, whether the
device worker runs as root (the candidate then runs as `nobody`) or as a user of its own (as in
docker/Dockerfile), when the candidate keeps the worker's uid and only Landlock keeps it out.

A worker that is not root is simulated as in production: a process forked from this one drops
to the sandbox user's uid and evaluates there, its own files owned by that uid.

The kernel reads with `syscall` instructions of its own, which the static scan rejects before
anything runs: its finding is set aside here, so that what keeps the judge's folder out of
reach at run time is tested.
"""

from __future__ import annotations

import ctypes
import errno
import importlib
import json
import os
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from apps.devices.evaluator import EvalSettings, OperatorUnderTest, evaluate_candidate
from apps.devices.services import operator_under_test
from apps.sandbox import jail, landlock, seccomp
from apps.sandbox.interpreter import sandbox_python
from apps.sandbox.prctl import PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, prctl
from tests.factories import stored_builtin

ROOT = Path(__file__).resolve().parents[2]
KERNELS = Path(__file__).resolve().parent / "adversarial"
READS_JUDGE = (KERNELS / "reads_judge.c").read_text()
TIMED = EvalSettings(seeds=2, warmup=1, repeats=5, threads=1, timing=True)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can become another user")
OWN_SYSTEM_CALLS = "makes system calls of its own"


@pytest.fixture
def gemm(db: None) -> OperatorUnderTest:
    return operator_under_test(stored_builtin("gemm"))


@pytest.fixture
def worker_cache() -> Iterator[Path]:
    """A build cache the simulated worker owns (the real one is root's)."""
    path = Path(tempfile.mkdtemp(prefix="kope-worker-cache-"))
    uid, gid = jail.sandbox_ids()
    os.chown(path, uid, gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def assert_unable_to_copy_the_expected_outputs(verdict: dict[str, Any]) -> None:
    assert verdict["status"] == "incorrect", verdict["reason"]
    assert verdict["timed"] is None
    errors = {c.get("error") for c in verdict["correct"]["cases"]}
    assert errors == {"output 0 has NaN where the reference has numbers (unwritten?)"}


def test_a_kernel_cannot_copy_the_expected_outputs(
    gemm: OperatorUnderTest, past_the_scan: list[str]
) -> None:
    """The control, as this test runs: as root, the candidate runs as `nobody`."""
    assert_unable_to_copy_the_expected_outputs(evaluate_candidate(gemm, READS_JUDGE, TIMED))
    assert past_the_scan and all("syscall at 0x" in o for o in past_the_scan)


@needs_root
def test_a_worker_that_is_not_root_keeps_the_expected_outputs_from_the_kernel(
    gemm: OperatorUnderTest, worker_cache: Path, past_the_scan: list[str]
) -> None:
    if not landlock.landlock_abi():
        pytest.skip("this kernel has no Landlock: such a worker refuses (the test below)")

    outcome = as_worker_that_is_not_root(
        lambda: evaluate_candidate(gemm, READS_JUDGE, TIMED), worker_cache
    )

    assert_unable_to_copy_the_expected_outputs(outcome)


@needs_root
def test_a_worker_that_is_not_root_refuses_to_evaluate_without_landlock(
    gemm: OperatorUnderTest, worker_cache: Path, past_the_scan: list[str]
) -> None:
    def evaluate_where_landlock_is_refused() -> dict[str, Any]:
        refuse_landlock_syscalls()
        landlock.landlock_abi.cache_clear()
        return evaluate_candidate(gemm, READS_JUDGE, TIMED)

    outcome = as_worker_that_is_not_root(evaluate_where_landlock_is_refused, worker_cache)

    assert outcome.get("raised") == "EvaluationError", outcome.get("traceback", outcome)
    assert f"this worker runs as uid {jail.sandbox_ids()[0]}, not root" in outcome["message"]
    assert "the kernel has no Landlock" in outcome["message"]


@needs_root
def test_a_worker_that_is_not_root_still_profiles_and_debugs_a_kernel(
    gemm: OperatorUnderTest, worker_cache: Path
) -> None:
    """valgrind and the sanitizers run in the same Landlock domain (valgrind with the
    system temp folder too, where it keeps files of its own)."""
    if not landlock.landlock_abi():
        pytest.skip("this kernel has no Landlock")
    naive = (ROOT / "apps" / "operators" / "builtin" / "gemm" / "naive.c").read_text()
    options = EvalSettings(seeds=1, warmup=1, repeats=2, profile=True, debug=True)

    verdict = as_worker_that_is_not_root(
        lambda: evaluate_candidate(gemm, naive, options), worker_cache
    )

    assert verdict["status"] == "correct", verdict
    assert verdict["profiled"]["ok"], verdict["profiled"]["reason"]
    assert verdict["debugged"]["ok"] and verdict["debugged"]["clean"], verdict["debugged"]


# --- the simulated worker -------------------------------------------------------------------


def as_worker_that_is_not_root(evaluate: Callable[[], dict[str, Any]], cache: Path) -> Any:
    """evaluate() in a child of this process running as the sandbox user; its verdict, or
    {"raised": the exception's class name, "message": ...}."""
    # The venv's interpreter lies under /root (0700) here, which a worker of another uid could
    # not have installed: the confined steps run the one the sandbox user can (and the
    # reference's packages), looked up as root and cached for the child.
    sandbox_python()
    # Imported now: this interpreter's standard library may be out of the new uid's reach
    # (pyenv under /root), where a real worker's is its own. The evaluator imports it late.
    importlib.import_module("apps.devices.cpu_c.diagnostics")
    jail.sandbox_ids()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child reports through the pipe)
        os.close(read)
        try:
            become_worker(cache)
            answer: Any = evaluate()
        except Exception as error:
            answer = {"raised": type(error).__name__, "message": str(error),
                      "traceback": traceback.format_exc()}  # fmt: skip
        with os.fdopen(write, "w") as out:
            out.write(json.dumps(answer))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answers:
        text = answers.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def become_worker(cache: Path) -> None:
    settings.KOPE_BUILD_CACHE_DIR = cache
    settings.KOPE_REFERENCE_WARM = False  # the warm runner, if any, is this process's (root)
    uid, gid = jail.sandbox_ids()
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def refuse_landlock_syscalls() -> None:
    """What a container whose seccomp profile predates Landlock does: ENOSYS for its calls."""
    load_nr = (seccomp.BPF_LD | seccomp.BPF_W | seccomp.BPF_ABS, 0, 0, seccomp.SECCOMP_DATA_NR)
    jump_if = seccomp.BPF_JMP | seccomp.BPF_JEQ | seccomp.BPF_K
    ret = seccomp.BPF_RET | seccomp.BPF_K
    code = [
        load_nr,
        (jump_if, 3, 0, landlock.SYS_LANDLOCK_CREATE_RULESET),
        (jump_if, 2, 0, landlock.SYS_LANDLOCK_ADD_RULE),
        (jump_if, 1, 0, landlock.SYS_LANDLOCK_RESTRICT_SELF),
        (ret, 0, 0, seccomp.SECCOMP_RET_ALLOW),
        (ret, 0, 0, seccomp.SECCOMP_RET_ERRNO | errno.ENOSYS),
    ]
    program = b"".join(seccomp.SOCK_FILTER.pack(*instruction) for instruction in code)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = seccomp._SockFprog(len(code), ctypes.addressof(buffer))
    prctl(PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
    prctl(PR_SET_SECCOMP, seccomp.SECCOMP_MODE_FILTER, "PR_SET_SECCOMP", ctypes.byref(fprog))
