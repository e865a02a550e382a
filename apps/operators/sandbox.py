"""Run the reference runner (apps/operators/refrun.py) in a confined child process: forked from
a runner kept warm (apps/operators/warmrunner.py), or with KOPE_REFERENCE_WARM=false a fresh
process per request. Either way the child is confined by the reference step's policy
(apps/sandbox/policies.py): the sandbox user, no network, its work dir the only folder it
may write, and the answer read back from there without following a link it may have left."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings

from apps.operators.warmrunner import SUPPORTED, RunnerGone, pool, reference_env
from apps.sandbox import policies
from apps.sandbox.interpreter import sandbox_python
from apps.sandbox.jail import Limits
from apps.sandbox.policies import SandboxUnavailable, Step

ANSWER_LIMIT = 1 << 28  # bytes of answer read back; a describe of many cases is a few MB
STDERR_LIMIT = 1 << 20


class ReferenceRunError(RuntimeError):
    """The child failed as a whole: timed out, ran out of memory, or crashed."""


def run_reference(
    request: dict[str, Any], *, timeout_s: float | None = None, workdir: Path | None = None
) -> dict[str, Any]:
    """Send one request to a reference runner; its answer, or ReferenceRunError with the reason.
    The files the request names must lie in `workdir`, a folder handed to the sandbox user
    (`policies.hand_over`); without one, the run gets a fresh folder of its own."""
    timeout = timeout_s or settings.KOPE_REFERENCE_TIMEOUT_S
    return _answer_of(_run_child(request, timeout, workdir))


def run_reference_batch(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Several requests in one runner (PyTorch starts once); each answer may carry an error."""
    timeout = settings.KOPE_REFERENCE_TIMEOUT_S * max(1, len(requests))
    answer = _run_child({"batch": requests}, timeout, None)
    return list(answer["batch"])


def _answer_of(answer: dict[str, Any]) -> dict[str, Any]:
    if "error" in answer:
        raise ReferenceRunError(answer["error"])
    return answer


def _run_child(request: dict[str, Any], timeout: float, workdir: Path | None) -> dict[str, Any]:
    memory_mb = settings.KOPE_REFERENCE_MEMORY_MB
    limits = Limits(cpu_s=int(timeout) + 1, memory_mb=memory_mb, file_size_mb=memory_mb)
    with _folder(workdir) as folder:
        request = with_kernels_inside(request, folder)
        try:
            if settings.KOPE_REFERENCE_WARM and SUPPORTED:
                returncode, stdout, stderr = _in_a_warm_child(request, timeout, limits, folder)
            else:
                returncode, stdout, stderr = _in_a_fresh_process(request, timeout, limits, folder)
        except SandboxUnavailable as error:
            raise ReferenceRunError(str(error)) from None
    return _answer(returncode, stdout, stderr, memory_mb)


@contextlib.contextmanager
def _folder(given: Path | None) -> Iterator[Path]:
    if given is not None:
        yield given
        return
    with policies.workdir("kope-ref-") as folder:
        yield folder


def with_kernels_inside(request: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A compiled kernel to check (`kernel_so`) is copied into the work dir: the reference may
    read nothing of the build cache, where other teams' kernels are."""
    if "batch" in request:
        batch = request["batch"]
        return {
            "batch": [with_kernel_copy(r, folder, f"kernel-{i}.so") for i, r in enumerate(batch)]
        }
    return with_kernel_copy(request, folder, "kernel.so")


def with_kernel_copy(request: dict[str, Any], folder: Path, name: str) -> dict[str, Any]:
    if not request.get("kernel_so"):
        return request
    shutil.copyfile(request["kernel_so"], folder / name)
    (folder / name).chmod(0o644)
    return {**request, "kernel_so": str(folder / name)}


def _in_a_warm_child(
    request: dict[str, Any], timeout: float, limits: Limits, folder: Path
) -> tuple[int, bytes, bytes]:
    order = {"request": request, "timeout_s": timeout, "limits": dataclasses.asdict(limits),
             "workdir": str(folder), "answer_file": "answer.json",
             "stderr_file": "stderr.txt"}  # fmt: skip
    folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            ended = pool.serve(order)
        except RunnerGone as gone:
            raise ReferenceRunError(f"the reference runner stopped: {gone}") from None
        if ended["timed_out"]:
            raise ReferenceRunError(f"the reference did not finish within {timeout:g} s")
        stdout = policies.read_left_behind(folder_fd, "answer.json", ANSWER_LIMIT) or b""
        stderr = policies.read_left_behind(folder_fd, "stderr.txt", STDERR_LIMIT) or b""
    finally:
        os.close(folder_fd)
    return int(ended["returncode"]), stdout, stderr


def _in_a_fresh_process(
    request: dict[str, Any], timeout: float, limits: Limits, folder: Path
) -> tuple[int, bytes, bytes]:
    command = [sandbox_python()[0], "-s", "-m", "apps.operators.refrun"]
    child = policies.start(Step.REFERENCE, command, workdir=folder, limits=limits,
                           env=reference_env(int(request.get("threads", 1))),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)  # fmt: skip
    try:
        stdout, stderr = child.communicate(json.dumps(request).encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        policies.kill_group(child)
        child.communicate()
        raise ReferenceRunError(f"the reference did not finish within {timeout:g} s") from None
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)  # nothing it started outlives it
    return child.returncode, stdout, stderr


def _answer(returncode: int, stdout: bytes, stderr: bytes, memory_mb: int) -> dict[str, Any]:
    text = stderr.decode(errors="replace")
    if returncode != 0:
        if "MemoryError" in text or "std::bad_alloc" in text or "DefaultCPUAllocator" in text:
            raise ReferenceRunError(f"the reference ran out of memory (limit {memory_mb} MB)")
        if returncode < 0:
            name = signal.Signals(-returncode).name
            raise ReferenceRunError(f"the reference process was killed by {name}")
        raise ReferenceRunError(f"the reference process failed: {text.strip()[-500:]}")
    try:
        answer: dict[str, Any] = json.loads(stdout)
    except ValueError:
        raise ReferenceRunError(f"the reference printed no answer: {text.strip()[-500:]}") from None
    return answer
