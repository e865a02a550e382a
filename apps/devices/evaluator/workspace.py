"""The work space: a judge's folder the candidate cannot read, a sandbox folder it can."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from django.conf import settings

from apps.devices.evaluator.settings import EvaluationError
from apps.sandbox import policies, workdirs
from apps.sandbox.policies import SandboxUnavailable


class Workspace:
    def __init__(self, expected_bytes: int = 0) -> None:
        self.expected_bytes = expected_bytes  # what the runs will write, as far as known

    def __enter__(self) -> Workspace:
        base = settings.KOPE_EVAL_WORK_DIR or work_dir_for(self.expected_bytes)
        self.root = Path(tempfile.mkdtemp(prefix="kope-eval-", dir=base))
        self.claim = workdirs.claim(self.root)  # a worker's sweep removes it if this process dies
        self.root.chmod(0o711)
        self.judge = self.root / "judge"
        self.judge.mkdir(mode=0o700)
        self.sandbox = self.root / "sandbox"
        self.sandbox.mkdir()
        self.sandbox.chmod(0o777)  # the confined process runs as SANDBOX_USER
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.claim.release()


def check_judge_hidden(workspace: Workspace) -> None:
    """Refuses (EvaluationError) where the candidate could read the expected outputs: a judge's
    folder among the files its step may read (a host that cannot confine it at all was refused
    before compiling, by require_confinement)."""
    judge = workspace.judge.resolve()
    readable = policies.python_files().every_path()
    exposed = [p for p in readable if judge.is_relative_to(Path(p).resolve())]
    if exposed:
        raise EvaluationError(
            f"the judge's folder {judge} is inside {exposed[0]}, which the candidate may "
            "read: set KOPE_EVAL_WORK_DIR to a folder outside it"
        )


def require_confinement() -> None:
    """Refuses (EvaluationError) on a host where the steps cannot be confined."""
    try:
        policies.check_confinable()
    except SandboxUnavailable as error:
        raise EvaluationError(f"{error}; the candidate was not judged") from None


def default_work_dir() -> str | None:
    """A RAM-backed folder when there is one: runs write and read back large arrays."""
    shm = Path("/dev/shm")  # noqa: S108 (mkdtemp makes a private folder inside it)
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def work_dir_for(expected_bytes: int) -> str | None:
    """The RAM folder while the evaluation's arrays take at most a quarter of what is free there,
    once what dead evaluations left there is removed; the system temp folder (disk) beyond.
    Every seed of every case of an imported problem comes to gigabytes, and /dev/shm is the
    machine's memory: a few such evaluations, or their leftovers, starved every process."""
    shm = default_work_dir()
    if shm is None:
        return None
    workdirs.remove_abandoned([shm], ("kope-eval-",))
    return shm if expected_bytes * 4 <= shutil.disk_usage(shm).free else None


FULL_BELOW_BYTES = 64 * 1024


def work_dir_full(root: Path) -> bool:
    return shutil.disk_usage(root).free < FULL_BELOW_BYTES


def no_space(root: Path) -> str:
    usage = shutil.disk_usage(root)
    return (f"the work dir {root.parent} is full ({usage.free // 1024} KiB free of "
            f"{usage.total // 1024} KiB): No space left on device. Free space there or set "
            "KOPE_EVAL_WORK_DIR to a bigger disk; the candidate was not judged")  # fmt: skip
