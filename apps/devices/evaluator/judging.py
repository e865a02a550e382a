"""The judge: the files the harness left behind, compared with the reference's after it exited."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import numpy as np

from apps.devices.evaluator.harness import HarnessOutcome
from apps.devices.evaluator.runs import OperatorUnderTest, Run
from apps.devices.evaluator.settings import EvaluationError
from apps.devices.evaluator.workspace import Workspace
from apps.operators.sandbox import ReferenceRunError, run_reference
from apps.operators.spec import OperatorSpec
from apps.sandbox import policies


def judge(workspace: Workspace, operator: OperatorUnderTest, runs: list[Run],
          outcome: HarnessOutcome) -> dict[str, Any]:  # fmt: skip
    spec = operator.spec
    custom = custom_checks(workspace, operator, runs, outcome) if operator.has_custom_check else {}
    cases = [judge_run(workspace, spec, run, outcome, custom.get(run.run_id)) for run in runs]
    by_run = {c["run_id"]: c for c in cases}
    for run in runs:
        both_pass = (
            run.repeat_of and by_run[run.run_id]["passed"] and by_run[run.repeat_of]["passed"]
        )
        if both_pass and not same_outputs(workspace, run):
            by_run[run.run_id]["nondeterministic"] = True
    failed = [c for c in cases if not c["passed"]]
    return {"ok": not failed and not outcome.failure, "runs": len(cases), "failed": len(failed),
            "cases": cases}  # fmt: skip


def judge_run(workspace: Workspace, spec: OperatorSpec, run: Run, outcome: HarnessOutcome,
              custom_passed: bool | None) -> dict[str, Any]:  # fmt: skip
    entry: dict[str, Any] = {"run_id": run.run_id, "case_id": run.case_id,
                             "repeat": run.repeat_of is not None, "passed": False}  # fmt: skip
    if run.run_id not in outcome.finished:
        return {**entry, "error": "not run: the candidate process stopped before this run"}
    status = outcome.finished[run.run_id]
    if status != 0:
        return {**entry, "error": f"kope_kernel returned {status}"}
    entry["inputs_intact"] = inputs_intact(workspace, run)
    comparisons = [compare_output(workspace, run, i, m, spec)
                   for i, m in enumerate(run.generated["outputs"])]  # fmt: skip
    entry["max_abs"] = max((c["max_abs"] for c in comparisons), default=0.0)
    entry["max_rel"] = max((c["max_rel"] for c in comparisons), default=0.0)
    problems = [c["problem"] for c in comparisons if c["problem"]]
    if not entry["inputs_intact"]:
        problems.append("the kernel wrote its inputs")
    matched = all(c["within_tolerance"] for c in comparisons)
    if custom_passed is not None:  # the operator's own rule decides closeness
        matched = custom_passed and all(c["shape_ok"] for c in comparisons)
        if not custom_passed:
            problems.append("the operator's own precision check failed")
    entry["passed"] = matched and entry["inputs_intact"]
    if problems or not entry["passed"]:
        entry["error"] = "; ".join(problems) or "outside the tolerance"
    return entry


def inputs_intact(workspace: Workspace, run: Run) -> bool:
    for i, meta in enumerate(run.generated["inputs"]):
        if file_sha256(workspace.sandbox / f"{run.run_id}.in{i}") != meta["sha256"]:
            return False
    return True


def file_sha256(path: Path) -> str:
    """The sha256 of a regular file (a link the candidate put in its folder is not followed);
    "" when there is none."""
    handle = policies.open_left_behind(path)
    if handle is None:
        return ""
    digest = hashlib.sha256()
    with handle:
        while chunk := handle.read(2**22):
            digest.update(chunk)
    return digest.hexdigest()


def read_array(path: Path, meta: dict[str, Any]) -> np.ndarray | None:
    expected_bytes = int(np.prod(meta["shape"], dtype=np.int64)) * np.dtype(meta["dtype"]).itemsize
    if expected_bytes == 0:
        return np.zeros(meta["shape"], dtype=meta["dtype"])
    handle = policies.open_left_behind(path)
    if handle is None:
        return None
    with handle:
        if os.fstat(handle.fileno()).st_size != expected_bytes:
            return None
        return np.fromfile(handle, dtype=meta["dtype"]).reshape(meta["shape"])


def compare_output(workspace: Workspace, run: Run, index: int, meta: dict[str, Any],
                   spec: OperatorSpec, *, produced: str = "out") -> dict[str, Any]:  # fmt: skip
    """One output against the reference's; `produced` names the file the harness wrote:
    "out" for a correctness run, "last" for the last timed call, "small" for the smaller
    case's last call."""
    source_id = run.repeat_of or run.run_id
    expected = read_array(workspace.judge / f"{source_id}.out{index}", meta)
    actual = read_array(workspace.sandbox / f"{run.run_id}.{produced}{index}", meta)
    result = {"shape_ok": actual is not None, "within_tolerance": False, "max_abs": float("inf"),
              "max_rel": float("inf"), "problem": ""}  # fmt: skip
    if expected is None or actual is None:
        return {**result, "problem": f"output {index} is missing or has the wrong size"}
    errors = [chunk_errors(a, e, spec) for a, e in chunks(actual.reshape(-1), expected.reshape(-1))]
    nan = any(err[3] for err in errors)
    result["max_abs"] = float("inf") if nan else max((err[0] for err in errors), default=0.0)
    result["max_rel"] = float("inf") if nan else max((err[1] for err in errors), default=0.0)
    result["within_tolerance"] = all(err[2] for err in errors)
    if nan:
        result["problem"] = f"output {index} has NaN where the reference has numbers (unwritten?)"
    return result


COMPARE_CHUNK = 1 << 20  # elements: big outputs are compared piece by piece, in cache


def chunks(actual: np.ndarray, expected: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(actual[i : i + COMPARE_CHUNK], expected[i : i + COMPARE_CHUNK])
            for i in range(0, actual.size, COMPARE_CHUNK)]  # fmt: skip


def chunk_errors(
    actual: np.ndarray, expected: np.ndarray, spec: OperatorSpec
) -> tuple[float, float, bool, bool]:
    """(max abs error, max rel error, within tolerance, NaN where the reference has a number)."""
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    diff = np.abs(a - e)
    if not np.isfinite(diff).all():  # a NaN or an infinity on either side
        return nonfinite_chunk_errors(a, e, diff, spec)
    magnitude = np.abs(e)
    if actual.dtype.kind == "f":  # np.allclose's test, which for finite numbers is this one
        within = bool((diff <= spec.max_abs + spec.max_rel * magnitude).all())
    else:
        within = bool(np.array_equal(actual, expected))
    rel = diff / np.maximum(magnitude, 1e-12, out=magnitude)
    return (float(diff.max()) if diff.size else 0.0, float(rel.max()) if rel.size else 0.0,
            within, False)  # fmt: skip


def nonfinite_chunk_errors(a: np.ndarray, e: np.ndarray, diff: np.ndarray,
                           spec: OperatorSpec) -> tuple[float, float, bool, bool]:  # fmt: skip
    """chunk_errors where a difference is not a finite number (about one chunk in many). Only
    floating outputs get here: integers are finite as float64, and so are their differences."""
    nan = bool(np.isnan(diff).any() and not np.array_equal(np.isnan(a), np.isnan(e)))
    within = bool(np.allclose(a, e, rtol=spec.max_rel, atol=spec.max_abs, equal_nan=True))
    finite = diff[~np.isnan(diff)]
    rel = finite / np.maximum(np.abs(e[~np.isnan(diff)]), 1e-12)
    return (float(finite.max()) if finite.size else 0.0, float(rel.max()) if rel.size else 0.0,
            within and not nan, nan)  # fmt: skip


def same_outputs(workspace: Workspace, run: Run) -> bool:
    assert run.repeat_of is not None
    return all(
        file_sha256(workspace.sandbox / f"{run.run_id}.out{i}")
        == file_sha256(workspace.sandbox / f"{run.repeat_of}.out{i}")
        for i in range(len(run.generated["outputs"]))
    )


def custom_checks(workspace: Workspace, operator: OperatorUnderTest, runs: list[Run],
                  outcome: HarnessOutcome) -> dict[str, bool]:  # fmt: skip
    """Ask the reference runner to apply the operator's own checker to each finished run."""
    items, by_id = [], {run.run_id: run for run in runs}
    for run in runs:
        if run.run_id not in outcome.finished:
            continue
        items.append(run.run_id)
    with policies.workdir("checker-", parent=workspace.root) as folder:
        request = {"kind": operator.reference_kind, "source": operator.reference_source,
                   "mode": "check", "checks": [check_item(workspace, folder, by_id[r])
                                               for r in items]}  # fmt: skip
        try:
            answer = run_reference(request, workdir=folder)
        except ReferenceRunError as error:
            raise EvaluationError(f"the operator's checker failed: {error}") from None
    return {c["run_id"]: bool(c["passed"]) for c in answer["checks"]}


def is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def check_item(workspace: Workspace, folder: Path, run: Run) -> dict[str, Any]:
    """The expected and produced outputs of `run`, copied into the checker's folder."""
    source_id = run.repeat_of or run.run_id
    outputs = run.generated["outputs"]
    for i in range(len(outputs)):
        shutil.copyfile(workspace.judge / f"{source_id}.out{i}", folder / f"{run.run_id}.exp{i}")
        with (folder / f"{run.run_id}.act{i}").open("wb") as copy:
            produced = policies.open_left_behind(workspace.sandbox / f"{run.run_id}.out{i}")
            if produced is not None:
                with produced:
                    shutil.copyfileobj(produced, copy)
    return {
        "run_id": run.run_id, "params": run.params, "dir": str(folder),
        "expected": [{**m, "file": f"{run.run_id}.exp{i}"} for i, m in enumerate(outputs)],
        "actual": [{**m, "file": f"{run.run_id}.act{i}"} for i, m in enumerate(outputs)],
    }  # fmt: skip
