"""The cpu-c evaluation pipeline: compile, vet, generate, run confined, judge, time, diagnose.

Three kinds of process take part. This one (the worker, trusted) only orchestrates and
judges. The reference runner (apps/operators/refrun.py) makes each run's inputs from a seed
and computes the expected outputs before any candidate code is loaded. The candidate harness
(apps/devices/cpu_c/harness.py) runs confined and sees only inputs; it never sees a seed or
an expected output. The judge here compares files the harness left behind, after it exited.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from apps.core.errors import require_whole_numbers
from apps.devices.cpu_c.build import CompileError, FlagsRejected, compile_kernel
from apps.devices.cpu_c.gcc import compiler_name
from apps.devices.cpu_c.protocol import (
    BASELINE,
    CANDIDATE,
    CHECKED,
    LAST,
    QUIT,
    RECORD,
    REFERENCE,
    RENEW,
    RENEWED,
    SMALL,
    order_tag,
    replies,
)
from apps.devices.symbols import symbol_problems
from apps.operators.sandbox import ReferenceRunError, run_reference
from apps.operators.spec import OperatorSpec
from apps.sandbox import policies, workdirs
from apps.sandbox.interpreter import sandbox_python
from apps.sandbox.jail import Limits
from apps.sandbox.policies import SandboxUnavailable, Step

TARGET = "cpu-c"
ROOT = Path(__file__).resolve().parents[2]
IMPLAUSIBLE_SPEEDUP = 10.0
# What one evaluation may ask for; the KOPE_EVAL_* settings have the same bounds.
EVAL_BOUNDS: dict[str, tuple[int, int]] = {
    "seeds": (1, 20), "warmup": (0, 1000), "repeats": (1, 100_000), "threads": (1, 1024),
}  # fmt: skip


class EvaluationError(RuntimeError):
    """The evaluation could not be carried out (not the candidate's fault): say why."""


@dataclass(frozen=True)
class EvalSettings:
    seeds: int = 3
    warmup: int = 5
    repeats: int = 100
    threads: int = 1
    timing: bool = True
    profile: bool = False
    debug: bool = False
    extra_flags: tuple[str, ...] = ()
    # The kernel the candidate changed (a stored source's sha256, and its flags): timed beside
    # it in the same process, so the two compare under the same conditions.
    baseline_sha256: str = ""
    baseline_flags: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, **overrides: Any) -> EvalSettings:
        defaults = {
            "seeds": settings.KOPE_EVAL_SEEDS, "warmup": settings.KOPE_EVAL_WARMUP,
            "repeats": settings.KOPE_EVAL_REPEATS, "threads": settings.KOPE_EVAL_THREADS,
        }  # fmt: skip
        return cls(**{**defaults, **overrides})

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> EvalSettings:
        return cls(**{**stored, "extra_flags": tuple(stored.get("extra_flags", ())),
                      "baseline_flags": tuple(stored.get("baseline_flags", ()))})  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        if not self.baseline_sha256:  # so settings stored before baselines keep their key
            del data["baseline_sha256"], data["baseline_flags"]
        return data

    def check(self) -> None:
        require_whole_numbers("evaluation", EVAL_BOUNDS, asdict(self))

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.as_json(), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class OperatorUnderTest:
    """What the pipeline needs of an operator version (no database access in here)."""

    label: str  # e.g. "softmax_rows v1"
    spec: OperatorSpec
    reference_kind: str
    reference_source: dict[str, Any]
    cases: list[dict[str, Any]]  # case_id, params, dtype, timing, unsupported_targets
    has_custom_check: bool = False


@dataclass
class Run:
    run_id: str
    case_id: str
    params: dict[str, Any]
    dtype: str
    seed: int
    attrs: list[float]
    timing: bool = False
    repeat_of: str | None = None  # the same inputs again: nondeterminism shows as a difference
    generated: dict[str, Any] = field(default_factory=dict)


# --- the pipeline -----------------------------------------------------------------------------


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


FULL_BELOW_BYTES = 64 * 1024


def work_dir_full(root: Path) -> bool:
    return shutil.disk_usage(root).free < FULL_BELOW_BYTES


def no_space(root: Path) -> str:
    usage = shutil.disk_usage(root)
    return (f"the work dir {root.parent} is full ({usage.free // 1024} KiB free of "
            f"{usage.total // 1024} KiB): No space left on device. Free space there or set "
            "KOPE_EVAL_WORK_DIR to a bigger disk; the candidate was not judged")  # fmt: skip


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


# --- the work space: a judge's folder the candidate cannot read, a sandbox folder it can -------


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


def evaluation_bytes(operator: OperatorUnderTest, seeds: int) -> int:
    """The runs' inputs and outputs, and the judge's expected outputs beside them."""
    runs = sum((seeds_of(operator, case, seeds) + (not case["timing"])) * int(case.get("bytes", 0))
               for case in operator.cases)  # fmt: skip
    return 2 * runs


# --- runs: every supported case, several seeds; the first seed again to catch nondeterminism ---


def plan_runs(operator: OperatorUnderTest, seeds: int, *, target: str = TARGET,
              with_timing: bool = True) -> list[Run]:  # fmt: skip
    """Without timing (a GPU target on a host with no device) the timing case is left out."""
    base = secrets.randbits(31)  # fresh per evaluation; never leaves this process and refrun
    runs = []
    for index, case in enumerate(
        c for c in operator.cases if target not in c["unsupported_targets"]
    ):
        if case["timing"] and not with_timing:
            continue
        attrs = operator.spec.attribute_values(case["params"])
        for s in range(seeds_of(operator, case, seeds)):
            seed = (base + 7919 * index + 104729 * s) % 2**31
            runs.append(Run(f"c{index}s{s}", case["case_id"], case["params"], case["dtype"], seed,
                            attrs, timing=bool(case["timing"]) and s == 0))  # fmt: skip
        if not case["timing"]:  # a timing case is big: it is not run twice
            first = runs[-seeds]
            runs.append(Run(f"c{index}r", first.case_id, first.params, first.dtype, first.seed,
                            attrs, repeat_of=first.run_id))  # fmt: skip
    if not runs:
        raise EvaluationError(f"{operator.label} has no case the {target} target can represent")
    return runs


def seeds_of(operator: OperatorUnderTest, case: dict[str, Any], seeds: int) -> int:
    """A built-in operator's timing case is big, and what its size can reveal (index overflow,
    a buffer too small) one seed shows: its small cases get the fresh seeds. An imported
    problem's cases are all the shapes its suite gives, so each gets every seed (the timing
    case's first one is timed): a kernel that fits one draw of them fails another."""
    if case["timing"] and operator.reference_kind not in SUITE_REFERENCE_KINDS:
        return 1
    return seeds


SUITE_REFERENCE_KINDS = frozenset({"kernelbench", "npukernelbench"})  # imported problems


def generate(workspace: Workspace, operator: OperatorUnderTest, runs: list[Run]) -> None:
    """The reference (outside code) writes inputs and expected outputs in a folder of its own;
    the inputs are moved to the sandbox's folder, the expected outputs to the judge's."""
    with policies.workdir("reference-", parent=workspace.root) as folder:
        request = {
            "kind": operator.reference_kind, "source": operator.reference_source,
            "mode": "generate", "input_dir": str(folder), "expected_dir": str(folder),
            "runs": [{"run_id": r.run_id, "params": r.params, "dtype": r.dtype, "seed": r.seed}
                     for r in runs if r.repeat_of is None],
        }  # fmt: skip
        try:
            answer = run_reference(request, workdir=folder)
        except ReferenceRunError as error:
            raise EvaluationError(f"the reference of {operator.label} failed: {error}") from None
        by_id = {g["run_id"]: g for g in answer["runs"]}
        for run in runs:
            generated = by_id[run.repeat_of or run.run_id]
            if "error" in generated:
                raise EvaluationError(f"the reference of {operator.label} failed on "
                                      f"{run.case_id}: {generated['error']}")  # fmt: skip
            run.generated = generated
            run.attrs = run.attrs + list(generated["scalars"])
            if run.repeat_of is None:
                take_generated(folder, workspace, run)


def take_generated(folder: Path, workspace: Workspace, run: Run) -> None:
    for kind, target, mode in (("in", workspace.sandbox, 0o666), ("out", workspace.judge, 0o600)):
        for i in range(len(run.generated[f"{kind}puts"])):
            name = f"{run.run_id}.{kind}{i}"
            if not is_regular_file(folder / name):
                raise EvaluationError(f"the reference wrote no plain file {name}")
            os.rename(folder / name, target / name)
            (target / name).chmod(mode)


# --- the confined harness ---------------------------------------------------------------------


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


def copy_inputs_for_repeats(workspace: Workspace, runs: list[Run]) -> None:
    for run in runs:
        if run.repeat_of:
            for i in range(len(run.generated["inputs"])):
                target = workspace.sandbox / f"{run.run_id}.in{i}"
                shutil.copyfile(workspace.sandbox / f"{run.repeat_of}.in{i}", target)
                target.chmod(0o666)


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


# --- the judge --------------------------------------------------------------------------------


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
        return nonfinite_chunk_errors(actual, expected, a, e, diff, spec)
    magnitude = np.abs(e)
    if actual.dtype.kind == "f":  # np.allclose's test, which for finite numbers is this one
        within = bool((diff <= spec.max_abs + spec.max_rel * magnitude).all())
    else:
        within = bool(np.array_equal(actual, expected))
    rel = diff / np.maximum(magnitude, 1e-12, out=magnitude)
    return (float(diff.max()) if diff.size else 0.0, float(rel.max()) if rel.size else 0.0,
            within, False)  # fmt: skip


def nonfinite_chunk_errors(actual: np.ndarray, expected: np.ndarray, a: np.ndarray,
                           e: np.ndarray, diff: np.ndarray,
                           spec: OperatorSpec) -> tuple[float, float, bool, bool]:  # fmt: skip
    """chunk_errors where a difference is not a finite number (about one chunk in many)."""
    nan = bool(np.isnan(diff).any() and not np.array_equal(np.isnan(a), np.isnan(e)))
    if actual.dtype.kind == "f":
        within = bool(np.allclose(a, e, rtol=spec.max_rel, atol=spec.max_abs, equal_nan=True))
    else:
        within = bool(np.array_equal(actual, expected))
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


# --- timing -----------------------------------------------------------------------------------


def time_candidate(workspace: Workspace, operator: OperatorUnderTest, runs: list[Run],
                   options: EvalSettings, flags: list[str], *,
                   with_baseline: bool = False) -> dict[str, Any]:  # fmt: skip
    timing_runs = [r for r in runs if r.timing and r.repeat_of is None]
    if not timing_runs:
        return {"ok": False, "reason": f"{operator.label} has no timing case for {TARGET}"}
    run = timing_runs[0]
    scaling = scaling_run(runs, run)
    last_outputs = [
        {**m, "file": f"{run.run_id}.last{i}"} for i, m in enumerate(run.generated["outputs"])
    ]
    plan = {
        "run": {**harness_run(run), "outputs": last_outputs, "params": run.params,
                "scalars": run.generated["scalars"]},
        "reference": {"kind": operator.reference_kind, "source": operator.reference_source},
        "scaling": scaling_plan(scaling),
    }  # fmt: skip
    manifest = {
        "mode": "timing",
        "kernel_so": "kernel.so",
        "baseline_so": "baseline.so" if with_baseline else None,
        "threads": options.threads,
        "timing": plan,
        "tolerance": {"max_abs": operator.spec.max_abs, "max_rel": operator.spec.max_rel},
    }
    try:
        measured = run_timing_harness(workspace, manifest, options,
                                      with_scaling=scaling is not None,
                                      with_baseline=with_baseline)  # fmt: skip
    except TimingRefused as error:
        flags.append(f"timing refused: {error}")
        return {"ok": False, "reason": str(error)}
    wrong = wrong_calls(workspace, operator.spec, run, scaling, measured["first_wrong"])
    return timing_summary(run, scaling, {**measured, "wrong_calls": wrong}, options, flags)


def wrong_calls(workspace: Workspace, spec: OperatorSpec, run: Run, scaling: Run | None,
                first_wrong: int) -> list[str]:  # fmt: skip
    """The timed calls whose output was wrong, named: the first of the timed calls the harness
    checked, the last call (judged here) and the smaller case's last call (judged here)."""
    wrong = []
    if first_wrong:
        wrong.append(f"timed call {first_wrong} of case {run.case_id}")
    if not produced_right(workspace, spec, run, "last"):
        wrong.append(f"the last timed call of case {run.case_id}")
    if scaling is not None and not produced_right(workspace, spec, scaling, "small"):
        wrong.append(f"the last call of the smaller case {scaling.case_id}")
    return wrong


def produced_right(workspace: Workspace, spec: OperatorSpec, run: Run, produced: str) -> bool:
    return all(
        compare_output(workspace, run, i, m, spec, produced=produced)["within_tolerance"]
        for i, m in enumerate(run.generated["outputs"])
    )


# --- the judge's clock: it drives every timed call over a pipe and timestamps the replies ----


class TimingRefused(RuntimeError):
    """The candidate process broke the timing protocol, died, or overran; the message says how."""


class Channel:
    def __init__(self, go: int, report: int, deadline: float) -> None:
        self.go, self.report, self.deadline = go, report, deadline

    def order(self, tag: bytes, iteration: int) -> tuple[int, int]:
        """Send one order; (the nonce it carries, the time it was sent)."""
        nonce = secrets.randbits(63)
        os.write(self.go, RECORD.pack(tag, iteration, nonce, 0))
        return nonce, time.perf_counter_ns()

    def expect(self, tag: bytes, iteration: int, nonce: int) -> int:
        """Wait for the reply; the time it arrived. Anything else refuses the timing."""
        arrived, status = self.receive(tag, iteration, nonce)
        if status != 0:
            raise TimingRefused(f"kope_kernel returned {status} during timing")
        return arrived

    def renew(self, iteration: int) -> bool:
        """Have the harness put new contents in the timed inputs; whether it did."""
        nonce, _ = self.order(RENEW, iteration)
        _, status = self.receive(RENEW, iteration, nonce)
        return status == RENEWED

    def receive(self, tag: bytes, iteration: int, nonce: int) -> tuple[int, int]:
        """The reply to an order: the time it arrived and its status."""
        data = b""
        while len(data) < RECORD.size:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.report], [], [], remaining)[0]:
                raise TimingRefused(f"no reply within the {settings.KOPE_EVAL_TIMEOUT_S} s limit")
            chunk = os.read(self.report, RECORD.size - len(data))
            if not chunk:
                raise TimingRefused("the candidate process stopped during timing")
            data += chunk
        arrived = time.perf_counter_ns()
        got_tag, got_iteration, got_nonce, status = RECORD.unpack(data)
        if (got_tag, got_iteration, got_nonce) != (tag, iteration, nonce):
            raise TimingRefused(
                "a reply the harness did not send (the kernel wrote to the timing channel)"
            )
        return arrived, status


def drive_timing(channel: Channel, options: EvalSettings, *, with_scaling: bool,
                 with_baseline: bool = False) -> dict[str, Any]:  # fmt: skip
    reference_ns: list[int] = []
    timed_ns: dict[bytes, list[int]] = {CANDIDATE: [], BASELINE: []}
    scaling_ns = []
    renewed = 0
    for iteration in range(options.warmup + options.repeats):
        new_contents = channel.renew(iteration)
        tag = order_tag(iteration, with_baseline)
        nonce, sent = channel.order(tag, iteration)
        reference_done = previous = channel.expect(REFERENCE, iteration, nonce)
        for timed in replies(tag, with_baseline):
            done = channel.expect(timed, iteration, nonce)
            if iteration >= options.warmup:
                timed_ns[timed].append(done - previous)
            previous = done
        if iteration >= options.warmup:
            reference_ns.append(reference_done - sent)
            renewed += new_contents
    for iteration in range(scaling_repeats(options) if with_scaling else 0):
        nonce, sent = channel.order(SMALL, iteration)
        scaling_ns.append(channel.expect(SMALL, iteration, nonce) - sent)
    nonce, _ = channel.order(LAST, 0)
    channel.expect(LAST, 0, nonce)
    nonce, _ = channel.order(CHECKED, 0)
    _, first_wrong = channel.receive(CHECKED, 0, nonce)
    channel.order(QUIT, 0)
    return {"reference_ns": reference_ns, "candidate_ns": timed_ns[CANDIDATE],
            "baseline_ns": timed_ns[BASELINE], "scaling_ns": scaling_ns, "status": 0,
            "inputs_renewed": renewed, "first_wrong": first_wrong}  # fmt: skip


def scaling_repeats(options: EvalSettings) -> int:
    return max(5, options.repeats // 5)


def run_timing_harness(
    workspace: Workspace, manifest: dict[str, Any], options: EvalSettings, *,
    with_scaling: bool, with_baseline: bool = False,
) -> dict[str, Any]:  # fmt: skip
    go_read, go_write = os.pipe()
    report_read, report_write = os.pipe()
    manifest["channel"] = {"go": go_read, "report": report_write}
    child, log = start_harness(workspace, manifest, options, pass_fds=(go_read, report_write))
    os.close(go_read)
    os.close(report_write)
    deadline = time.monotonic() + settings.KOPE_EVAL_TIMEOUT_S
    try:
        return drive_timing(Channel(go_write, report_read, deadline), options,
                            with_scaling=with_scaling, with_baseline=with_baseline)  # fmt: skip
    except TimingRefused as error:
        policies.kill_group(child)
        raise TimingRefused(f"{error}{crash_detail(child.returncode, log)}") from None
    finally:
        os.close(go_write)
        os.close(report_read)
        policies.wait_or_kill(child, 10)  # an overrun after its last reply changes nothing


def crash_detail(returncode: int, log: Path) -> str:
    if returncode >= 0:
        return ""
    _, others = scan_log(log)
    return f" (killed by {signal.Signals(-returncode).name}: {' | '.join(others) or 'no message'})"


def scaling_plan(scaling: Run | None) -> dict[str, Any] | None:
    """The smaller case's calls write files of their own: the correctness run's stay as judged."""
    if scaling is None:
        return None
    outputs = [{**m, "file": f"{scaling.run_id}.small{i}"}
               for i, m in enumerate(harness_run(scaling)["outputs"])]  # fmt: skip
    return {**harness_run(scaling), "outputs": outputs}


def scaling_run(runs: list[Run], timing: Run) -> Run | None:
    """A smaller case to time as well: a kernel whose time does not grow with size is suspect."""
    size = input_elements(timing)
    smaller = [r for r in runs if r.repeat_of is None and not r.timing and r.run_id.endswith("s0")
               and input_elements(r) * 4 <= size]  # fmt: skip
    return max(smaller, key=input_elements, default=None)


def input_elements(run: Run) -> int:
    return sum(int(np.prod(m["shape"], dtype=np.int64)) for m in run.generated["inputs"])


def stats_ms(samples_ns: list[int]) -> dict[str, float]:
    values = np.array(samples_ns, dtype=np.float64) / 1e6
    return {"mean_ms": float(values.mean()), "median_ms": float(np.median(values)),
            "min_ms": float(values.min()), "samples": len(values)}  # fmt: skip


def paired_ratio(baseline_ns: list[int], candidate_ns: list[int]) -> float:
    """How many times faster the candidate ran than the baseline: the median, over the timed
    orders, of the baseline's time over the candidate's in that order. The two calls of an
    order run one after the other, so a host that slows down midway slows both; the ratio of
    the two medians can take each from another side of the change."""
    ratios = [b / max(c, 1) for b, c in zip(baseline_ns, candidate_ns, strict=True)]
    return float(np.median(np.array(ratios, dtype=np.float64)))


def timing_summary(run: Run, scaling: Run | None, result: dict[str, Any], options: EvalSettings,
                   flags: list[str]) -> dict[str, Any]:  # fmt: skip
    candidate, reference = stats_ms(result["candidate_ns"]), stats_ms(result["reference_ns"])
    speedup = reference["median_ms"] / max(candidate["median_ms"], 1e-9)
    summary: dict[str, Any] = {
        "ok": not result["wrong_calls"] and result.get("status") == 0, "case_id": run.case_id,
        "threads": options.threads, "warmup": options.warmup, "repeats": options.repeats,
        "candidate": candidate, "reference": reference, "speedup": speedup,
        "candidate_samples_ms": [n / 1e6 for n in result["candidate_ns"]],
        "inputs_renewed": result.get("inputs_renewed", 0),
    }  # fmt: skip
    if result.get("baseline_ns"):
        summary["baseline"] = stats_ms(result["baseline_ns"])
        summary["baseline_samples_ms"] = [n / 1e6 for n in result["baseline_ns"]]
        summary["vs_baseline"] = paired_ratio(result["baseline_ns"], result["candidate_ns"])
    if result["wrong_calls"]:
        summary["wrong_calls"] = result["wrong_calls"]
        summary["reason"] = (f"wrong output on {'; '.join(result['wrong_calls'])} (results "
                             "remembered between calls?)")  # fmt: skip
    if speedup > IMPLAUSIBLE_SPEEDUP:
        flags.append(f"implausible speedup {speedup:.1f}x vs the reference: review before trusting")
    scaling_ns = result.get("scaling_ns")
    if scaling is not None and isinstance(scaling_ns, list) and scaling_ns:
        small = float(np.median(np.array(scaling_ns, dtype=np.float64))) / 1e6
        work_ratio = input_elements(run) / max(1, input_elements(scaling))
        time_ratio = candidate["median_ms"] / max(small, 1e-9)
        summary["scaling"] = {"case_id": scaling.case_id, "median_ms": small,
                              "work_ratio": work_ratio, "time_ratio": time_ratio}  # fmt: skip
        if time_ratio < 1.5:
            flags.append(f"time does not grow with input size ({work_ratio:.0f}x the elements, "
                         f"{time_ratio:.2f}x the time)")  # fmt: skip
    return summary


# --- diagnostics on request: a cachegrind profile, an ASan + UBSan run ------------------------


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
