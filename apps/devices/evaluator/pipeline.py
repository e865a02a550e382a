"""The pipeline: compile, vet, then the stages in turn, each timed into the verdict."""

from __future__ import annotations

import contextlib
import errno
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apps.devices.cpu_c.build import CompileError, FlagsRejected, compile_kernel
from apps.devices.cpu_c.gcc import compiler_name
from apps.devices.evaluator.diagnostics import debug, profile
from apps.devices.evaluator.harness import correctness_manifest, run_harness
from apps.devices.evaluator.judging import file_sha256, judge
from apps.devices.evaluator.reference import copy_inputs_for_repeats, generate
from apps.devices.evaluator.runs import OperatorUnderTest, evaluation_bytes, plan_runs
from apps.devices.evaluator.settings import TARGET, EvalSettings, EvaluationError
from apps.devices.evaluator.timing import time_candidate
from apps.devices.evaluator.workspace import (
    Workspace,
    check_judge_hidden,
    no_space,
    require_confinement,
    work_dir_full,
)
from apps.devices.symbols import symbol_problems


def evaluate_candidate(
    operator: OperatorUnderTest, source: str, options: EvalSettings,
    baseline_source: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    verdict = new_verdict(options)
    require_confinement()  # gcc and nm read the candidate too: nothing runs unconfined
    try:
        with stage(verdict, "compile"):
            build = compile_kernel(source, options.extra_flags)
    except FlagsRejected as error:
        return finish(verdict, "rejected", reason=str(error))
    except CompileError as error:
        verdict["compiled"] = {"ok": False, "errors": [m.as_json() for m in error.messages],
                               "output": error.output[-4000:]}  # fmt: skip
        return finish(verdict, "compile_error")
    # The binary's hash lets the loop see a change gcc compiled away (same object, same speed).
    verdict["compiled"] = {"ok": True, "cached": build.cached, "flags": build.flags,
                           "sha256": file_sha256(build.path),
                           "warnings": [m.as_json() for m in build.warnings]}  # fmt: skip
    verdict["environment"]["flags"] = build.flags
    with stage(verdict, "vet"):
        problems = symbol_problems(build.path)
    if problems:
        return finish(verdict, "rejected", reason="; ".join(problems))
    with Workspace(evaluation_bytes(operator, options.seeds)) as workspace:
        check_judge_hidden(workspace)
        try:
            verdict = run_in(
                workspace, operator, source, build.path, options, verdict, baseline_source
            )
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            raise EvaluationError(no_space(workspace.root)) from None
        # A full work dir breaks runs in ways that look like the candidate's fault (a
        # SIGBUS on a mapped output, a truncated array): no verdict is given then.
        if work_dir_full(workspace.root):
            raise EvaluationError(no_space(workspace.root))
        return verdict


def baseline_build(source: str, options: EvalSettings) -> Path:
    """The baseline's shared object: it was a correct candidate once, so any fault is ours."""
    require_confinement()
    try:
        path = compile_kernel(source, options.baseline_flags).path
    except (FlagsRejected, CompileError) as error:
        raise EvaluationError(f"the baseline kernel no longer builds: {error}") from None
    problems = symbol_problems(path)
    if problems:
        raise EvaluationError(f"the baseline kernel is refused: {'; '.join(problems)}")
    return path


def run_in(workspace: Workspace, operator: OperatorUnderTest, source: str, shared_object: Path,
           options: EvalSettings, verdict: dict[str, Any],
           baseline_source: str | None = None) -> dict[str, Any]:  # fmt: skip
    runs = plan_runs(operator, options.seeds)
    with stage(verdict, "reference"):
        generate(workspace, operator, runs)
        copy_inputs_for_repeats(workspace, runs)
    verdict["flags"] += sorted(
        {f"constant inputs in {r.case_id}" for r in runs if r.generated.get("constant_inputs")}
    )
    shutil.copyfile(shared_object, workspace.sandbox / "kernel.so")
    with stage(verdict, "correctness"):
        outcome = run_harness(workspace, correctness_manifest(runs, options), options)
    with stage(verdict, "judge"):
        verdict["correct"] = judge(workspace, operator, runs, outcome)
    if outcome.failure:
        return finish(verdict, outcome.failure_kind, reason=outcome.failure)
    if not verdict["correct"]["ok"]:
        return finish(verdict, "incorrect")
    nondeterministic = [
        c["case_id"] for c in verdict["correct"]["cases"] if c.get("nondeterministic")
    ]
    if nondeterministic:
        verdict["flags"].append(
            f"nondeterministic output on {', '.join(sorted(set(nondeterministic)))}"
        )
    if options.timing:
        if baseline_source:
            with stage(verdict, "compile"):
                baseline = baseline_build(baseline_source, options)
            shutil.copyfile(baseline, workspace.sandbox / "baseline.so")
        with stage(verdict, "timing"):
            verdict["timed"] = time_candidate(workspace, operator, runs, options,
                                              verdict["flags"],
                                              with_baseline=bool(baseline_source))  # fmt: skip
        if verdict["timed"].get("wrong_calls"):
            return wrong_when_timed(verdict)
    if options.profile:
        with stage(verdict, "profile"):
            verdict["profiled"] = profile(workspace, operator, runs, source,
                                          verdict.get("timed"),
                                          verdict["compiled"]["flags"])  # fmt: skip
    if options.debug:
        with stage(verdict, "debug"):
            verdict["debugged"] = debug(workspace, runs, source)
    return finish(verdict, "correct")


def wrong_when_timed(verdict: dict[str, Any]) -> dict[str, Any]:
    """A wrong answer on any call is a wrong kernel: the verdict is INCORRECT, naming the call,
    and no speedup is given for it."""
    calls = verdict["timed"]["wrong_calls"]
    verdict["correct"]["ok"] = False
    verdict["correct"]["failed"] += len(calls)
    verdict["correct"]["cases"] += [{"run_id": "timing", "case_id": call, "repeat": False,
                                     "passed": False, "error": f"wrong output on {call}"}
                                    for call in calls]  # fmt: skip
    return finish(verdict, "incorrect", reason=verdict["timed"]["reason"])


def new_verdict(options: EvalSettings) -> dict[str, Any]:
    return {
        "status": "pending", "reason": "", "target": TARGET, "settings": options.as_json(),
        "compiled": None, "correct": None, "timed": None, "profiled": None, "debugged": None,
        "flags": [], "stage_seconds": {},
        "environment": {"compiler": compiler_name(), "cpu_model": cpu_model(),
                        "threads": options.threads, "flags": []},
    }  # fmt: skip


@contextlib.contextmanager
def stage(verdict: dict[str, Any], name: str) -> Iterator[None]:
    """Add the block's wall seconds to the verdict's `stage_seconds[name]`: where an
    evaluation's time goes (`bench evaluator` sums them), whatever the block ended in."""
    started = time.perf_counter()
    try:
        yield
    finally:
        spent = verdict["stage_seconds"].get(name, 0.0) + time.perf_counter() - started
        verdict["stage_seconds"][name] = round(spent, 4)


def finish(verdict: dict[str, Any], status: str, *, reason: str = "") -> dict[str, Any]:
    verdict["status"] = status
    verdict["reason"] = reason or verdict.get("reason", "")
    return verdict


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
