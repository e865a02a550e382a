"""The cpu-c evaluation pipeline: compile, vet, generate, run confined, judge, time, diagnose.

Three kinds of process take part. This one (the worker, trusted) only orchestrates and
judges. The reference runner (apps/operators/refrun.py) makes each run's inputs from a seed
and computes the expected outputs before any candidate code is loaded. The candidate harness
(apps/devices/cpu_c/harness.py) runs confined and sees only inputs; it never sees a seed or
an expected output. The judge here compares files the harness left behind, after it exited.

One module per stage, in the order an evaluation goes through them: settings (what an
evaluation may ask for), runs (the cases and seeds), workspace (the judge's and the sandbox's
folders), reference (inputs and expected outputs), harness (the confined candidate process),
judging (the comparison), timing (the judge's clock), diagnostics (a profile, a sanitizer run)
and pipeline (evaluate_candidate, which runs them in turn). The names used outside the package
are re-exported here.
"""

from apps.devices.evaluator.harness import (
    HarnessOutcome,
    Started,
    harness_env,
    harness_run,
    read_outcome,
)
from apps.devices.evaluator.judging import (
    chunk_errors,
    compare_output,
    judge,
    nonfinite_chunk_errors,
)
from apps.devices.evaluator.pipeline import (
    evaluate_candidate,
    finish,
    new_verdict,
    wrong_when_timed,
)
from apps.devices.evaluator.reference import copy_inputs_for_repeats, generate
from apps.devices.evaluator.runs import OperatorUnderTest, Run, evaluation_bytes, plan_runs
from apps.devices.evaluator.settings import EVAL_BOUNDS, TARGET, EvalSettings, EvaluationError
from apps.devices.evaluator.timing import (
    IMPLAUSIBLE_SPEEDUP,
    paired_ratio,
    stats_ms,
    timing_summary,
)
from apps.devices.evaluator.workspace import Workspace, default_work_dir, work_dir_for

__all__ = [
    "EVAL_BOUNDS",
    "IMPLAUSIBLE_SPEEDUP",
    "TARGET",
    "EvalSettings",
    "EvaluationError",
    "HarnessOutcome",
    "OperatorUnderTest",
    "Run",
    "Started",
    "Workspace",
    "chunk_errors",
    "compare_output",
    "copy_inputs_for_repeats",
    "default_work_dir",
    "evaluate_candidate",
    "evaluation_bytes",
    "finish",
    "generate",
    "harness_env",
    "harness_run",
    "judge",
    "new_verdict",
    "nonfinite_chunk_errors",
    "paired_ratio",
    "plan_runs",
    "read_outcome",
    "stats_ms",
    "timing_summary",
    "work_dir_for",
    "wrong_when_timed",
]
