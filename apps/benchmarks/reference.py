"""`manage.py bench reference`: what the warm reference runner saves an evaluation.

The naive kernels of built-in operators of different families are evaluated with the reference
run in a fresh process per request (KOPE_REFERENCE_WARM=false: a Python that imports PyTorch each
time) and in a child forked from a warm runner, in turns, in one process; the side that goes
first alternates. Per operator and as geometric means over them:

* reference_speedup: the median reference request an evaluation makes (its inputs and expected
  outputs), fresh / warm;
* evaluation_speedup: the median whole evaluation (cached compile, correctness, timing),
  fresh / warm.

The warm runner is started before the first timed request: a worker starts one and serves every
later evaluation from it.
"""

from __future__ import annotations

import statistics
from typing import Any

from django.test.utils import override_settings

from apps.benchmarks.evaluator import (
    CANDIDATE_SLUGS,
    QUICK_SLUGS,
    Benchmark,
    BenchOptions,
    Candidate,
    builtin_candidates,
    evaluate,
    seconds,
)
from apps.devices.cpu_c.build import compile_kernel
from apps.devices.evaluator import EvalSettings, Workspace, generate, plan_runs

SETTINGS = EvalSettings(seeds=1, warmup=2, repeats=10, threads=1, timing=True)
QUICK_REPEATS = 2
MODES = {"fresh": False, "warm": True}  # KOPE_REFERENCE_WARM


def reference_benchmark(options: BenchOptions) -> dict[str, Any]:
    candidates = builtin_candidates(QUICK_SLUGS if options.quick else CANDIDATE_SLUGS)
    repeats = QUICK_REPEATS if options.quick else options.repeats
    with override_settings(KOPE_REFERENCE_WARM=True):
        reference_request(candidates[0])  # starts the warm runner, untimed
    rows = []
    for candidate in candidates:
        options.progress(f"{candidate.slug}: {repeats} turns, fresh and warm")
        compile_kernel(candidate.source)  # every evaluation below finds its build cached
        rows.append(operator_row(candidate, repeats))
    return {
        "reference_speedup": statistics.geometric_mean(r["reference_speedup"] for r in rows),
        "evaluation_speedup": statistics.geometric_mean(r["evaluation_speedup"] for r in rows),
        "operators": rows,
        "repeats": repeats,
        "settings": SETTINGS.as_json(),
    }


def operator_row(candidate: Candidate, repeats: int) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {
        mode: {"reference_s": [], "evaluation_s": []} for mode in MODES
    }
    for turn in range(repeats):
        order = list(MODES) if turn % 2 == 0 else list(MODES)[::-1]
        for mode in order:
            with override_settings(KOPE_REFERENCE_WARM=MODES[mode]):
                samples[mode]["reference_s"].append(seconds(lambda: reference_request(candidate)))
                samples[mode]["evaluation_s"].append(seconds(lambda: evaluate(candidate, SETTINGS)))
    medians = {mode: {k: statistics.median(v) for k, v in taken.items()}
               for mode, taken in samples.items()}  # fmt: skip
    return {
        "slug": candidate.slug,
        "fresh": medians["fresh"],
        "warm": medians["warm"],
        "reference_speedup": medians["fresh"]["reference_s"] / medians["warm"]["reference_s"],
        "evaluation_speedup": medians["fresh"]["evaluation_s"] / medians["warm"]["evaluation_s"],
    }


def reference_request(candidate: Candidate) -> None:
    """The request an evaluation makes first: inputs and expected outputs for every run."""
    with Workspace() as workspace:
        generate(workspace, candidate.operator, plan_runs(candidate.operator, SETTINGS.seeds))


def reference_table(report: dict[str, Any]) -> str:
    rows = [
        f"{r['slug']:<14}{r['fresh']['reference_s']:>11.2f}{r['warm']['reference_s']:>10.2f}"
        f"{r['reference_speedup']:>8.2f}{r['fresh']['evaluation_s']:>11.2f}"
        f"{r['warm']['evaluation_s']:>10.2f}{r['evaluation_speedup']:>8.2f}"
        for r in report["operators"]
    ]
    return "\n".join([
        f"Reference runner benchmark: naive kernels, medians of {report['repeats']} turns "
        "(fresh process per request against a child forked from a warm runner)",
        "",
        f"{'operator':<14}{'ref fresh':>11}{'ref warm':>10}{'ratio':>8}"
        f"{'eval fresh':>11}{'eval warm':>10}{'ratio':>8}",
        *rows,
        "",
        f"reference_speedup   {report['reference_speedup']:.2f}x  (geometric mean; seconds of a "
        "reference request, fresh / warm)",
        f"evaluation_speedup  {report['evaluation_speedup']:.2f}x  (geometric mean; seconds of a "
        "whole evaluation, fresh / warm)",
    ])  # fmt: skip


REFERENCE_BENCHMARK = Benchmark(run=reference_benchmark, render=reference_table)
