"""Diagnostics on request: a cachegrind profile, an ASan + UBSan run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from apps.devices.evaluator.judging import read_array
from apps.devices.evaluator.runs import OperatorUnderTest, Run
from apps.devices.evaluator.timing import input_elements
from apps.devices.evaluator.workspace import Workspace
from apps.sandbox.jail import Limits


def run_arrays(workspace: Workspace, run: Run) -> list[np.ndarray]:
    arrays = []
    for i, meta in enumerate(run.generated["inputs"]):
        array = read_array(workspace.sandbox / f"{run.run_id}.in{i}", meta)
        assert array is not None
        arrays.append(array)
    return arrays


def diagnostic_case(workspace: Workspace, run: Run, name: str) -> Path:
    """The run's case as driver.c reads it, in a file of the worker's (each diagnostic copies
    it into a work dir of its own)."""
    from apps.devices.cpu_c.casefile import write_case_file

    case = workspace.root / f"{name}.case"
    outputs = [(m["dtype"], m["shape"]) for m in run.generated["outputs"]]
    write_case_file(case, run_arrays(workspace, run), outputs, run.attrs)
    case.chmod(0o644)
    return case


def profile(workspace: Workspace, operator: OperatorUnderTest, runs: list[Run], source: str,
            timed: dict[str, Any] | None, timed_flags: list[str]) -> dict[str, Any]:  # fmt: skip
    from apps.devices.cpu_c.diagnostics import DiagnosticError, chrome_trace, profile_kernel

    firsts = [r for r in runs if r.repeat_of is None and r.run_id.endswith("s0")]
    run = next((r for r in firsts if r.timing), None) or max(firsts, key=input_elements)
    limits = Limits(cpu_s=diagnostic_seconds(), memory_mb=diagnostic_memory_mb(),
                    file_size_mb=256)  # fmt: skip
    try:
        data = profile_kernel(source, diagnostic_case(workspace, run, "profile"),
                              timed_flags=timed_flags, timeout_s=diagnostic_seconds(),
                              limits=limits, parent=workspace.root)  # fmt: skip
    except DiagnosticError as error:
        return {"ok": False, "reason": str(error)}
    samples = (timed or {}).get("candidate_samples_ms")
    return {"ok": True, "case_id": run.case_id, "profile": data,
            "trace": chrome_trace(data, samples, name=operator.label)}  # fmt: skip


def debug(workspace: Workspace, runs: list[Run], source: str) -> dict[str, Any]:
    from apps.devices.cpu_c.diagnostics import DiagnosticError, debug_kernel

    candidates = [r for r in runs if r.repeat_of is None and input_elements(r) > 1]
    run = min(candidates or runs, key=input_elements)
    # ASan reserves terabytes of address space for its shadow memory.
    limits = Limits(cpu_s=diagnostic_seconds(), memory_mb=2**26, file_size_mb=256)
    try:
        report = debug_kernel(source, diagnostic_case(workspace, run, "debug"),
                              timeout_s=diagnostic_seconds(), limits=limits,
                              parent=workspace.root)  # fmt: skip
    except DiagnosticError as error:
        return {"ok": False, "reason": str(error)}
    return {"ok": True, "case_id": run.case_id, **report}


def diagnostic_seconds() -> int:
    return settings.KOPE_EVAL_TIMEOUT_S * 4


def diagnostic_memory_mb() -> int:
    return max(settings.KOPE_EVAL_MEMORY_MB, 16384)  # valgrind reserves much address space
