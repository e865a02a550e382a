"""The GPU pipeline: vet, generate, run confined, judge, time, profile; for `triton` and `cuda`.

The pieces that do not depend on the target are the cpu-c evaluator's (the work space, the
reference runner's inputs, the judge, the verdict's shape); what differs is the candidate
process (apps/devices/gpu/harness.py), the clock (CUDA events, measured in that process), and
which cases run: without a CUDA device, `triton` runs the small cases in Triton's interpreter
and is not timed.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from apps.devices import evaluator as cpu
from apps.devices.compile_errors import CompilerMessage
from apps.devices.evaluator import (
    EvalSettings,
    EvaluationError,
    OperatorUnderTest,
    Run,
    Workspace,
    finish,
    plan_runs,
)
from apps.devices.gpu.device import (
    CudaDevice,
    cuda_availability,
    cuda_device,
    no_device_reason,
    tool_path,
    triton_version,
)
from apps.devices.gpu.static_checks import triton_problems
from apps.sandbox import policies
from apps.sandbox.interpreter import sandbox_python
from apps.sandbox.jail import Limits
from apps.sandbox.policies import Step

# The interpreter runs each Triton program in Python: cases up to this many input and output
# elements, together, are checked there (every level-1 operator has several).
INTERPRETER_MAX_ELEMENTS = 1 << 17
FLUSH_MIN_BYTES = 64 << 20
GPU_ADDRESS_SPACE_MB = 1 << 26  # CUDA maps address space for the device's memory and more
PASS_THROUGH = ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")
SIDE_WORK_MARGIN_MS = 0.05


def evaluate_triton(operator: OperatorUnderTest, source: str, options: EvalSettings
                    ) -> dict[str, Any]:  # fmt: skip
    device = cuda_device()
    verdict = new_verdict("triton", options, device)
    syntax = syntax_errors(source)
    if syntax:
        verdict["compiled"] = {"ok": False, "errors": syntax, "output": ""}
        return finish(verdict, "compile_error")
    problems = triton_problems(source, dtypes=case_dtypes(operator))
    if problems:
        return finish(verdict, "rejected", reason="; ".join(problems))
    verdict["compiled"] = {"ok": True, "cached": False, "flags": [], "warnings": []}
    with Workspace() as workspace:
        candidate = workspace.sandbox / "candidate.py"
        candidate.write_text(source)
        candidate.chmod(0o644)
        return run_in(workspace, operator, "triton", candidate, options, verdict, device)


def syntax_errors(source: str) -> list[dict[str, Any]]:
    """A module Python cannot parse, as the compile errors cpu-c reports."""
    try:
        ast.parse(source, filename="candidate.py")
    except SyntaxError as error:
        lines = source.splitlines()
        line = error.lineno or 0
        quoted = lines[line - 1] if 0 < line <= len(lines) else ""
        return [CompilerMessage("candidate.py", line, error.offset or 0, "error", error.msg,
                                quoted.rstrip()).as_json()]  # fmt: skip
    return []


def evaluate_cuda(operator: OperatorUnderTest, source: str, options: EvalSettings
                  ) -> dict[str, Any]:  # fmt: skip
    from apps.devices.gpu.cuda_build import CudaCompileError, compile_cuda

    available = cuda_availability()
    if not available.ok:
        raise EvaluationError(f"the cuda target is unavailable: {available.detail}")
    device = cuda_device()
    verdict = new_verdict("cuda", options, device)
    with Workspace() as workspace:
        try:
            build = compile_cuda(source, device, workspace.judge)
        except CudaCompileError as error:
            verdict["compiled"] = {"ok": False, "errors": [m.as_json() for m in error.messages],
                                   "output": error.output[-4000:]}  # fmt: skip
            return finish(verdict, "compile_error")
        verdict["compiled"] = {"ok": True, "cached": False, "flags": build.flags,
                               "warnings": [m.as_json() for m in build.warnings]}  # fmt: skip
        verdict["environment"]["flags"] = build.flags
        shutil.copyfile(build.path, workspace.sandbox / "kernel.so")
        (workspace.sandbox / "kernel.so").chmod(0o755)
        return run_in(workspace, operator, "cuda", workspace.sandbox / "kernel.so", options,
                      verdict, device)  # fmt: skip


def new_verdict(target: str, options: EvalSettings, device: CudaDevice | None) -> dict[str, Any]:
    verdict = cpu.new_verdict(options)
    where = device.name if device else f"CPU, Triton interpreter ({no_device_reason()})"
    compiler = f"triton {triton_version()}" if target == "triton" else "nvcc"
    verdict["target"] = target
    verdict["environment"].update({"compiler": f"{compiler} on {where}", "device": where})
    return verdict


def case_dtypes(operator: OperatorUnderTest) -> set[str]:
    spec = operator.spec
    declared = {t.dtype for t in spec.inputs + spec.outputs}
    return {c["dtype"] for c in operator.cases if c["dtype"]} | declared - {"case"}


def elements(run: Run) -> int:
    metas = run.generated["inputs"] + run.generated["outputs"]
    return sum(int(np.prod(m["shape"], dtype=np.int64)) for m in metas)


def declared_elements(operator: OperatorUnderTest, run: Run) -> int:
    """Input and output elements as the spec declares them; 0 where a size is per case."""
    spec = operator.spec
    sizes = [t.resolved_shape(run.params) for t in spec.inputs + spec.outputs]
    if any(not isinstance(d, int) for shape in sizes for d in shape):
        return 0
    return sum(int(np.prod([int(d) for d in shape], dtype=np.int64)) for shape in sizes)


def small_runs(workspace: Workspace, runs: list[Run]) -> tuple[list[Run], list[str]]:
    """The runs the interpreter can afford, and the case ids it leaves out."""
    kept = [r for r in runs if elements(r) <= INTERPRETER_MAX_ELEMENTS]
    dropped = [r for r in runs if r not in kept]
    for run in dropped:
        for path in workspace.sandbox.glob(f"{run.run_id}.in*"):
            path.unlink()
    return kept, sorted({r.case_id for r in dropped})


def run_in(workspace: Workspace, operator: OperatorUnderTest, kind: str, candidate: Path,
           options: EvalSettings, verdict: dict[str, Any],
           device: CudaDevice | None) -> dict[str, Any]:  # fmt: skip
    runs = plan_runs(operator, options.seeds, target=kind, with_timing=device is not None)
    skipped: list[str] = []
    if device is None:  # what the spec already shows to be too big is not even generated
        big = {r.case_id for r in runs if declared_elements(operator, r) > INTERPRETER_MAX_ELEMENTS}
        runs, skipped = [r for r in runs if r.case_id not in big], sorted(big)
    cpu.generate(workspace, operator, runs)
    if device is None:
        runs, dropped = small_runs(workspace, runs)
        skipped = sorted({*skipped, *dropped})
        if not runs:
            raise EvaluationError(f"{operator.label} has no case small enough for the interpreter")
    cpu.copy_inputs_for_repeats(workspace, runs)
    verdict["flags"] += sorted(
        {f"constant inputs in {r.case_id}" for r in runs if r.generated.get("constant_inputs")}
    )
    base = {"kind": kind, "candidate": candidate.name, "device": "cuda" if device else "cpu"}
    manifest = {**base, "mode": "correctness", "runs": [cpu.harness_run(r) for r in runs]}
    outcome, result = run_harness(workspace, manifest, options, device)
    verdict["correct"] = judge(workspace, operator, runs, outcome, result)
    verdict["correct"]["skipped_cases"] = skipped
    if outcome.failure:
        return finish(verdict, outcome.failure_kind, reason=outcome.failure)
    if not verdict["correct"]["ok"]:
        return finish(verdict, "incorrect")
    cpu_nondeterministic(verdict)
    if device is None:
        verdict["timed"] = {"ok": False, "reason": "no CUDA device: correctness checked in "
                            "Triton's interpreter on small cases, not timed"}  # fmt: skip
        if options.profile:
            verdict["profiled"] = {"ok": False, "reason": "profiles need a CUDA device"}
        return finish(verdict, "correct")
    if options.timing:
        verdict["timed"] = time_candidate(workspace, operator, runs, base, options, device,
                                          verdict["flags"])  # fmt: skip
        if verdict["timed"].get("wrong_calls"):
            return cpu.wrong_when_timed(verdict)
    if options.profile:
        verdict["profiled"] = profile(workspace, operator, runs, base, options, device)
    return finish(verdict, "correct")


def cpu_nondeterministic(verdict: dict[str, Any]) -> None:
    cases = [c["case_id"] for c in verdict["correct"]["cases"] if c.get("nondeterministic")]
    if cases:
        verdict["flags"].append(f"nondeterministic output on {', '.join(sorted(set(cases)))}")


# --- the confined harness ---------------------------------------------------------------------


def harness_env(workspace: Workspace, options: EvalSettings, device: CudaDevice | None
                ) -> dict[str, str]:  # fmt: skip
    env = cpu.harness_env(options)
    env.pop("MALLOC_PERTURB_")  # the CUDA driver and Triton's compiler are not ours to perturb
    if device is None:
        env["TRITON_INTERPRET"] = "1"
    else:
        cache = workspace.sandbox / ".triton"
        env.update({"TRITON_CACHE_DIR": str(cache / "cache"), "TRITON_HOME": str(cache)})
        env.update({k: os.environ[k] for k in PASS_THROUGH if k in os.environ})
    return env


def harness_limits(options: EvalSettings, device: CudaDevice | None) -> Limits:
    memory = GPU_ADDRESS_SPACE_MB if device else settings.KOPE_EVAL_MEMORY_MB
    return Limits(cpu_s=settings.KOPE_EVAL_TIMEOUT_S * max(1, options.threads), memory_mb=memory,
                  file_size_mb=4096)  # fmt: skip


def start_harness(workspace: Workspace, manifest: dict[str, Any], options: EvalSettings,
                  device: CudaDevice | None, *, prefix: tuple[str, ...] = ()
                  ) -> cpu.Started:  # fmt: skip
    name = f"{manifest['mode']}.json"
    (workspace.sandbox / name).write_text(json.dumps(manifest))
    (workspace.sandbox / name).chmod(0o644)
    limits = harness_limits(options, device)
    log = workspace.judge / f"{manifest['mode']}.log"
    command = [*prefix, sandbox_python()[0], "-s", "-m", "apps.devices.gpu.harness", name]
    with log.open("wb") as stdout:
        child = policies.start(Step.GPU_HARNESS, command, workdir=workspace.sandbox,
                               limits=limits, env=harness_env(workspace, options, device),
                               stdout=stdout, stderr=subprocess.STDOUT)  # fmt: skip
    return child, log


def run_harness(workspace: Workspace, manifest: dict[str, Any], options: EvalSettings,
                device: CudaDevice | None, **start: Any
                ) -> tuple[cpu.HarnessOutcome, dict[str, Any]]:  # fmt: skip
    child, log = start_harness(workspace, manifest, options, device, **start)
    timed_out = policies.wait_or_kill(child, settings.KOPE_EVAL_TIMEOUT_S)
    outcome = cpu.read_outcome(log, child.returncode, timed_out)
    return outcome, outcome.result or {}


def judge(workspace: Workspace, operator: OperatorUnderTest, runs: list[Run],
          outcome: cpu.HarnessOutcome, result: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The cpu-c judge, with the harness's own words for a call that raised or broke a rule."""
    correct = cpu.judge(workspace, operator, runs, outcome)
    problems = result.get("problems")
    for case in correct["cases"]:
        found = problems.get(case["run_id"]) if isinstance(problems, dict) else None
        if found and isinstance(found, list):
            case["error"] = "; ".join(str(p) for p in found)[:1200]
    return correct


# --- timing -----------------------------------------------------------------------------------


def time_candidate(workspace: Workspace, operator: OperatorUnderTest, runs: list[Run],
                   base: dict[str, Any], options: EvalSettings, device: CudaDevice,
                   flags: list[str]) -> dict[str, Any]:  # fmt: skip
    timing_runs = [r for r in runs if r.timing and r.repeat_of is None]
    if not timing_runs:
        return {"ok": False, "reason": f"{operator.label} has no timing case for {base['kind']}"}
    run = timing_runs[0]
    last = [{**m, "file": f"{run.run_id}.last{i}"} for i, m in enumerate(run.generated["outputs"])]
    plan = {
        "run": {**cpu.harness_run(run), "params": run.params}, "scalars": run.generated["scalars"],
        "last_outputs": last, "flush_bytes": max(FLUSH_MIN_BYTES, 2 * device.l2_bytes),
        "reference": {"kind": operator.reference_kind, "source": operator.reference_source},
    }  # fmt: skip
    manifest = {**base, "mode": "timing", "timing": plan, "warmup": options.warmup,
                "repeats": options.repeats}  # fmt: skip
    outcome, result = run_harness(workspace, manifest, options, device)
    if outcome.failure or not result.get("candidate_ms"):
        flags.append(f"timing refused: {outcome.failure or 'no samples'}")
        return {"ok": False, "reason": outcome.failure or "the harness returned no samples"}
    last_ok = result.get("last_status") == 0 and all(
        cpu.compare_output(workspace, run, i, m, operator.spec, produced="last")["within_tolerance"]
        for i, m in enumerate(run.generated["outputs"])
    )
    return timing_summary(run, result, last_ok, options, flags)


def stats(samples_ms: list[float]) -> dict[str, float]:
    return cpu.stats_ms([int(v * 1e6) for v in samples_ms])


def timing_summary(run: Run, result: dict[str, Any], last_ok: bool, options: EvalSettings,
                   flags: list[str]) -> dict[str, Any]:  # fmt: skip
    candidate, reference = stats(result["candidate_ms"]), stats(result["reference_ms"])
    wall = stats(result["candidate_wall_ms"])
    speedup = reference["median_ms"] / max(candidate["median_ms"], 1e-9)
    summary: dict[str, Any] = {
        "ok": last_ok, "case_id": run.case_id, "clock": "CUDA events, L2 flushed",
        "threads": options.threads, "warmup": options.warmup, "repeats": options.repeats,
        "candidate": candidate, "reference": reference, "candidate_wall": wall,
        "speedup": speedup, "candidate_samples_ms": result["candidate_ms"],
        "reference_samples_ms": result["reference_ms"],
    }  # fmt: skip
    if not last_ok:
        summary["wrong_calls"] = [f"the last timed call of case {run.case_id}"]
        summary["reason"] = (f"wrong output on the last timed call of case {run.case_id} (results "
                             "remembered between calls?)")  # fmt: skip
    if wall["median_ms"] > 3 * candidate["median_ms"] + SIDE_WORK_MARGIN_MS:
        flags.append(
            f"the device was busy {wall['median_ms']:.3f} ms per call but the timed "
            f"stream only {candidate['median_ms']:.3f} ms: work on another stream?"
        )
    if speedup > cpu.IMPLAUSIBLE_SPEEDUP:
        flags.append(f"implausible speedup {speedup:.1f}x vs the reference: review before trusting")
    return summary


# --- profile ----------------------------------------------------------------------------------

NCU_METRICS = (
    "gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread",
)  # fmt: skip


def profile(
    workspace: Workspace,
    operator: OperatorUnderTest,
    runs: list[Run],
    base: dict[str, Any],
    options: EvalSettings,
    device: CudaDevice,
) -> dict[str, Any]:
    """A torch.profiler timeline of five calls; Nsight Compute metrics when ncu is installed.
    Like cpu-c's profilers, this runs confined but without the seccomp filter."""
    firsts = [r for r in runs if r.repeat_of is None and r.run_id.endswith("s0")]
    run = next((r for r in firsts if r.timing), None) or max(firsts, key=elements)
    trace_file = workspace.sandbox / "trace.json"
    manifest = {**base, "mode": "profile", "runs": [{**cpu.harness_run(run), "params": run.params}],
                "trace_file": trace_file.name}  # fmt: skip
    outcome, result = run_harness(workspace, manifest, options, device)
    if outcome.failure or not trace_file.exists():
        return {"ok": False, "reason": outcome.failure or "the profiler wrote no trace"}
    data: dict[str, Any] = {"tool": "torch.profiler", "device": device.name,
                            "kernels": result.get("kernels", [])}  # fmt: skip
    data["totals"] = {"device_us": sum(k["device_us"] for k in data["kernels"])}
    data["ncu"] = nsight_metrics(workspace, manifest, options, device)
    trace = json.loads(trace_file.read_text())
    trace.setdefault("otherData", {}).update({"name": operator.label, "tool": data["tool"],
                                              "kernels": data["kernels"]})  # fmt: skip
    return {"ok": True, "case_id": run.case_id, "profile": data, "trace": trace}


def nsight_metrics(workspace: Workspace, manifest: dict[str, Any], options: EvalSettings,
                   device: CudaDevice) -> dict[str, Any]:  # fmt: skip
    ncu = tool_path("ncu")
    if ncu is None:
        return {"ok": False, "reason": "ncu (Nsight Compute) is not installed on this worker"}
    csv = workspace.sandbox / "ncu.csv"
    prefix = (ncu, "--csv", "--log-file", str(csv), "--metrics", ",".join(NCU_METRICS),
              "--launch-count", "20", "--target-processes", "all")  # fmt: skip
    outcome, _ = run_harness(workspace, {**manifest, "mode": "profile", "calls": 1}, options,
                             device, prefix=prefix)  # fmt: skip
    if outcome.failure or not csv.exists():
        return {"ok": False, "reason": outcome.failure or "ncu wrote no report"}
    return {"ok": True, "rows": parse_ncu_csv(csv.read_text())}


def parse_ncu_csv(text: str) -> list[dict[str, str]]:
    """ncu --csv: one row per (kernel launch, metric); kept as kernel, metric, unit, value."""
    import csv
    import io

    lines = [line for line in text.splitlines() if line.startswith('"')]
    rows = csv.DictReader(io.StringIO("\n".join(lines)))
    # A short row leaves its missing columns None (DictReader's restval).
    return [{"kernel": (r.get("Kernel Name") or "")[:200], "metric": r.get("Metric Name") or "",
             "unit": r.get("Metric Unit") or "", "value": r.get("Metric Value") or ""}
            for r in rows][:500]  # fmt: skip
