"""The confined harness: the candidate process, its limits and environment, and what its log
says it finished."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from apps.devices.evaluator.runs import Run
from apps.devices.evaluator.settings import EvalSettings, EvaluationError
from apps.devices.evaluator.workspace import Workspace
from apps.sandbox import policies
from apps.sandbox.interpreter import sandbox_python
from apps.sandbox.jail import Limits
from apps.sandbox.policies import SandboxUnavailable, Step

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class HarnessOutcome:
    result: dict[str, Any] | None
    finished: dict[str, int]  # run id -> what kope_kernel returned
    failure: str = ""
    failure_kind: str = ""  # crashed | timed_out


def correctness_manifest(runs: list[Run], options: EvalSettings) -> dict[str, Any]:
    return {"mode": "correctness", "kernel_so": "kernel.so", "threads": options.threads,
            "runs": [harness_run(r) for r in runs]}  # fmt: skip


def harness_run(run: Run) -> dict[str, Any]:
    inputs = [{"file": f"{run.run_id}.in{i}", "dtype": m["dtype"], "shape": m["shape"]}
              for i, m in enumerate(run.generated["inputs"])]  # fmt: skip
    outputs = [{"file": f"{run.run_id}.out{i}", "dtype": m["dtype"], "shape": m["shape"]}
               for i, m in enumerate(run.generated["outputs"])]  # fmt: skip
    return {"run_id": run.run_id, "inputs": inputs, "outputs": outputs, "attrs": run.attrs}


def harness_limits(options: EvalSettings, workspace: Workspace, manifest: dict[str, Any]) -> Limits:
    """The file-size limit leaves room for the largest output the kernel legitimately writes;
    the open-file limit for every run's files, which the harness opens before its filter."""
    runs = manifest.get("runs") or [manifest["timing"]["run"]]
    outputs = [m for run in runs for m in run["outputs"]]
    run_files = sum(len(run["inputs"]) + len(run["outputs"]) for run in runs)
    largest_output = max((output_bytes(m) for m in outputs), default=0)
    largest_file = max((p.stat().st_size for p in workspace.sandbox.iterdir()), default=0)
    largest = max(largest_output, largest_file)
    return Limits(
        cpu_s=settings.KOPE_EVAL_TIMEOUT_S * max(1, options.threads),
        memory_mb=settings.KOPE_EVAL_MEMORY_MB,
        file_size_mb=max(64, largest // 2**20 * 2 + 16),
        open_files=max(Limits.open_files, run_files + 64),
    )


def output_bytes(meta: dict[str, Any]) -> int:
    return int(np.prod(meta["shape"], dtype=np.int64)) * int(np.dtype(meta["dtype"]).itemsize)


def harness_env(options: EvalSettings) -> dict[str, str]:
    """Beside the sandbox's base (PATH, HOME, LANG, TMPDIR): nothing of the worker's own."""
    _, extra_paths = sandbox_python()
    return {
        "PYTHONPATH": os.pathsep.join([str(ROOT), *extra_paths]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": str(options.threads), "OMP_DYNAMIC": "false",
        "MALLOC_PERTURB_": "165",  # uninitialised heap memory is garbage, not lucky zeros
        # ...including small blocks glibc would otherwise hand back from its per-thread cache.
        "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0",
    }  # fmt: skip


def run_harness(
    workspace: Workspace, manifest: dict[str, Any], options: EvalSettings
) -> HarnessOutcome:
    child, log = start_harness(workspace, manifest, options)
    timed_out = policies.wait_or_kill(child, settings.KOPE_EVAL_TIMEOUT_S)
    return read_outcome(log, child.returncode, timed_out)


Started = tuple[subprocess.Popen[bytes], Path]  # the child and the file its output goes to


def start_harness(workspace: Workspace, manifest: dict[str, Any], options: EvalSettings,
                  pass_fds: tuple[int, ...] = ()) -> Started:  # fmt: skip
    name = f"{manifest['mode']}.json"
    (workspace.sandbox / name).write_text(json.dumps(manifest))
    (workspace.sandbox / name).chmod(0o644)
    limits = harness_limits(options, workspace, manifest)
    log = workspace.judge / f"{manifest['mode']}.log"
    command = [sandbox_python()[0], "-s", "-m", "apps.devices.cpu_c.harness", name]
    with log.open("wb") as stdout:
        try:
            child = policies.start(Step.HARNESS, command, workdir=workspace.sandbox,
                                   limits=limits, env=harness_env(options), stdout=stdout,
                                   stderr=subprocess.STDOUT, pass_fds=pass_fds)  # fmt: skip
        except SandboxUnavailable as error:
            raise EvaluationError(f"{error}; the candidate was not judged") from None
    return child, log


def read_outcome(log: Path, returncode: int, timed_out: bool) -> HarnessOutcome:
    lines, others = scan_log(log)
    done = [line.split() for line in lines if line.startswith("done ") and len(line.split()) == 3]
    statuses = [(parts[1], kernel_status(parts[2])) for parts in done]
    finished = {run_id: status for run_id, status in statuses if status is not None}
    started = [
        line.split()[1] for line in lines if line.startswith("start ") and len(line.split()) == 2
    ]
    result_line = next((line for line in reversed(lines) if line.startswith("result ")), None)
    result = parsed_result(result_line) if result_line and returncode == 0 else None
    running = started[-1] if started and started[-1] not in finished else None
    where = f" in run {running}" if running else ""
    if timed_out or returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        limit = "wall-clock" if timed_out else "CPU"
        return HarnessOutcome(None, finished, f"the {limit} time limit ran out{where}", "timed_out")
    if returncode != 0 or result is None:
        cause = (
            f"killed by {signal.Signals(-returncode).name}"
            if returncode < 0
            else f"exit status {returncode}"
        )
        detail = " | ".join(others)[-600:] or "no message"
        if log.stat().st_size >= 2**20 * 64:
            detail = f"it printed {log.stat().st_size // 2**20} MB; {detail}"
        return HarnessOutcome(
            None, finished, f"the candidate process crashed ({cause}){where}: {detail}", "crashed"
        )
    return HarnessOutcome(result, finished)


PROTOCOL = (b"start ", b"done ", b"result ")
INT32_TEXT = re.compile(r"-?[0-9]{1,10}")


def kernel_status(text: str) -> int | None:
    """What kope_kernel returned (an int32), read from a `done` line; None for anything else:
    the kernel can write such lines too, so they are untrusted input."""
    if not INT32_TEXT.fullmatch(text):
        return None
    status = int(text)
    return status if -(2**31) <= status < 2**31 else None


def scan_log(log: Path) -> tuple[list[str], list[str]]:
    """The harness's progress lines, however much else was printed, and the last 3 others."""
    protocol: list[str] = []
    others: collections.deque[str] = collections.deque(maxlen=3)
    with log.open("rb") as handle:
        for raw in handle:
            line = raw[:65536].decode(errors="replace").rstrip("\n")
            if raw.startswith(PROTOCOL):
                protocol.append(line)
            elif line.strip():
                others.append(line[:300])
    return protocol, list(others)


def parsed_result(line: str) -> dict[str, Any] | None:
    """The harness's result line; None when it is not a JSON object (the kernel can write to
    stdout too, so this line is untrusted input)."""
    try:
        result = json.loads(line[len("result ") :])
    except ValueError:
        return None
    return result if isinstance(result, dict) else None
