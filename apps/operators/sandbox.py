"""Run the reference runner (apps/operators/refrun.py) in a limited child process: forked from
a runner kept warm (apps/operators/warmrunner.py), or with KOPE_REFERENCE_WARM=false a fresh
process per request."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings

from apps.core.parent_death import die_with_parent
from apps.operators.childlimits import apply_limits, clean_env
from apps.operators.warmrunner import SUPPORTED, RunnerGone, pool


class ReferenceRunError(RuntimeError):
    """The child failed as a whole: timed out, ran out of memory, or crashed."""


def run_reference(request: dict[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]:
    """Send one request to a reference runner; its answer, or ReferenceRunError with the reason."""
    return _answer_of(_run_child(request, timeout_s or settings.KOPE_REFERENCE_TIMEOUT_S))


def run_reference_batch(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Several requests in one runner (PyTorch starts once); each answer may carry an error."""
    timeout = settings.KOPE_REFERENCE_TIMEOUT_S * max(1, len(requests))
    answer = _run_child({"batch": requests}, timeout)
    return list(answer["batch"])


def _answer_of(answer: dict[str, Any]) -> dict[str, Any]:
    if "error" in answer:
        raise ReferenceRunError(answer["error"])
    return answer


def _run_child(request: dict[str, Any], timeout: float) -> dict[str, Any]:
    memory_mb = settings.KOPE_REFERENCE_MEMORY_MB
    with tempfile.TemporaryDirectory(prefix="kope-ref-") as workdir:
        if settings.KOPE_REFERENCE_WARM and SUPPORTED:
            returncode, stdout, stderr = _in_a_warm_child(request, timeout, memory_mb, workdir)
        else:
            returncode, stdout, stderr = _in_a_fresh_process(request, timeout, memory_mb, workdir)
    return _answer(returncode, stdout, stderr, memory_mb)


def _in_a_warm_child(
    request: dict[str, Any], timeout: float, memory_mb: int, workdir: str
) -> tuple[int, bytes, bytes]:
    answer_file, stderr_file = Path(workdir, "answer.json"), Path(workdir, "stderr.txt")
    order = {"request": request, "timeout_s": timeout, "memory_mb": memory_mb,
             "cpu_s": int(timeout) + 1, "workdir": workdir,
             "answer_file": str(answer_file), "stderr_file": str(stderr_file)}  # fmt: skip
    try:
        ended = pool.serve(order)
    except RunnerGone as gone:
        raise ReferenceRunError(f"the reference runner stopped: {gone}") from None
    if ended["timed_out"]:
        raise ReferenceRunError(f"the reference did not finish within {timeout:g} s")
    stdout = answer_file.read_bytes() if answer_file.exists() else b""
    stderr = stderr_file.read_bytes() if stderr_file.exists() else b""
    return int(ended["returncode"]), stdout, stderr


def _in_a_fresh_process(
    request: dict[str, Any], timeout: float, memory_mb: int, workdir: str
) -> tuple[int, bytes, bytes]:
    worker = os.getpid()
    child = subprocess.Popen(
        [sys.executable, "-s", "-m", "apps.operators.refrun"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env=clean_env(int(request.get("threads", 1))),
        preexec_fn=lambda: limited_for_life(worker, memory_mb, int(timeout) + 1),
        start_new_session=True,
    )
    try:
        stdout, stderr = child.communicate(json.dumps(request).encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise ReferenceRunError(f"the reference did not finish within {timeout:g} s") from None
    return child.returncode, stdout, stderr


def limited_for_life(worker: int, memory_mb: int, cpu_s: int) -> None:
    """A fresh reference child's preexec_fn: its limits, and ended with the worker."""
    apply_limits(memory_mb, cpu_s)
    die_with_parent(worker)


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
