"""Benchmarks of the evaluation machinery itself, run by `manage.py bench NAME`.

`evaluator` measures, on the naive kernels of built-in operators of different families:

* overhead_fraction: what a full evaluation costs beyond the candidate's own timed work,
  (wall time - sum of the candidate's timed samples) / that sum;
* compile_cache_speedup: a cold compile against a lookup of the same source in the cache;
* stage_seconds, per candidate: the verdict's seconds by stage, and "other" for the rest;
* spread_median, spread_p90: how far the speedups of repeated evaluations of one candidate
  stray from their median, |speedup_i / median - 1|;
* latency_spread_median, latency_spread_p90: the same for the candidate's own median latency,
  from the same evaluations: how far apart two timings of one kernel taken minutes apart are;
* baseline_spread_median, baseline_spread_p90: |vs_baseline - 1| in the same evaluations, each
  of which also timed the candidate as its own baseline, in turn in the same process: how far
  from even the side-by-side comparison the loop judges candidates by puts a kernel and itself.
  vs_baseline is the median of the per-order ratios (evaluator.paired_ratio);
  medians_baseline_spread_median and _p90 are the same with the ratio of the two medians
  instead, from the same samples: the two estimators side by side.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from django.test.utils import override_settings

from apps.devices.cpu_c.build import compile_kernel
from apps.devices.cpu_c.gcc import compiler_version
from apps.devices.evaluator import (
    TARGET,
    EvalSettings,
    EvaluationError,
    OperatorUnderTest,
    evaluate_candidate,
)
from apps.devices.services import operator_under_test
from apps.devices.verdicts import stage_seconds_text
from apps.operators.selectors import operator_get, version_get
from apps.operators.services import builtin_suite_load

CANDIDATE_SLUGS = ("vector_add", "softmax_rows", "gemm")  # elementwise, normalization, matmul
QUICK_SLUGS = ("gemm",)  # the cheapest to evaluate: its cases are small in bytes
SPREAD_SLUG = "gemm"
# Fewer timed repeats than an evaluation's default, to keep a run to a couple of minutes.
BENCH_SETTINGS = EvalSettings(seeds=1, warmup=2, repeats=20, threads=1, timing=True)
QUICK_SETTINGS = EvalSettings(seeds=1, warmup=1, repeats=3, threads=1, timing=True)
CACHED_LOOKUPS = 20


class BenchmarkError(RuntimeError):
    """The benchmark could not measure what it set out to; the message says why."""


@dataclass(frozen=True)
class BenchOptions:
    repeats: int = 10
    quick: bool = False
    progress: Callable[[str], None] = field(default=lambda line: None)

    @property
    def evaluation(self) -> EvalSettings:
        return QUICK_SETTINGS if self.quick else BENCH_SETTINGS


@dataclass(frozen=True)
class Candidate:
    slug: str
    operator: OperatorUnderTest
    source: str


@dataclass(frozen=True)
class CandidateCosts:
    slug: str
    wall_s: float
    candidate_work_s: float
    overhead_fraction: float
    cold_compile_s: float
    cached_lookup_s: float
    compile_cache_speedup: float
    speedup: float
    stage_seconds: dict[str, float]  # the verdict's, plus "other": the wall time none of them took


@dataclass(frozen=True)
class Benchmark:
    run: Callable[[BenchOptions], dict[str, Any]]
    render: Callable[[dict[str, Any]], str]


# --- the evaluator benchmark ------------------------------------------------------------------


def evaluator_benchmark(options: BenchOptions) -> dict[str, Any]:
    candidates = builtin_candidates(QUICK_SLUGS if options.quick else CANDIDATE_SLUGS)
    compiler_version()  # gcc --version runs once per process: not part of any compile below
    costs = []
    for candidate in candidates:
        options.progress(f"measuring {candidate.slug}")
        costs.append(candidate_costs(candidate, options.evaluation))
    spread_candidate = next((c for c in candidates if c.slug == SPREAD_SLUG), candidates[0])
    options.progress(f"timing {spread_candidate.slug} {options.repeats} times")
    timed = repeated_timings(spread_candidate, options.repeats, options.evaluation)
    speedups = [float(t["speedup"]) for t in timed]
    latencies = [float(t["candidate"]["median_ms"]) for t in timed]
    deviations, latency_deviations = spread(speedups), spread(latencies)
    baseline_deviations = [abs(float(t["vs_baseline"]) - 1) for t in timed]
    medians_deviations = [abs(t["baseline"]["median_ms"] / t["candidate"]["median_ms"] - 1)
                          for t in timed]  # fmt: skip
    return {
        "overhead_fraction": statistics.median(c.overhead_fraction for c in costs),
        "compile_cache_speedup": statistics.median(c.compile_cache_speedup for c in costs),
        "spread_median": statistics.median(deviations),
        "spread_p90": float(np.percentile(deviations, 90)),
        "latency_spread_median": statistics.median(latency_deviations),
        "latency_spread_p90": float(np.percentile(latency_deviations, 90)),
        "baseline_spread_median": statistics.median(baseline_deviations),
        "baseline_spread_p90": float(np.percentile(baseline_deviations, 90)),
        "medians_baseline_spread_median": statistics.median(medians_deviations),
        "medians_baseline_spread_p90": float(np.percentile(medians_deviations, 90)),
        "settings": options.evaluation.as_json(),
        "candidates": [asdict(c) for c in costs],
        "spread": {"slug": spread_candidate.slug, "speedups": speedups,
                   "latencies_ms": latencies},
    }  # fmt: skip


def builtin_candidates(slugs: tuple[str, ...]) -> list[Candidate]:
    """The naive kernels of these built-in operators, stored first if the database is new."""
    builtin_suite_load()
    candidates = []
    for slug in slugs:
        version = version_get(operator_get(None, slug))
        source = version.starting_kernels.get(target=TARGET).source
        candidates.append(Candidate(slug, operator_under_test(version), source))
    return candidates


def candidate_costs(candidate: Candidate, evaluation: EvalSettings) -> CandidateCosts:
    cold_s, cached_s = compile_times(candidate.source)
    compile_kernel(candidate.source)  # the evaluation below finds its build in the real cache
    started = time.perf_counter()
    verdict = evaluate(candidate, evaluation)
    wall_s = time.perf_counter() - started
    work_s = sum(verdict["timed"]["candidate_samples_ms"]) / 1000
    return CandidateCosts(
        slug=candidate.slug, wall_s=wall_s, candidate_work_s=work_s,
        overhead_fraction=(wall_s - work_s) / work_s, cold_compile_s=cold_s,
        cached_lookup_s=cached_s, compile_cache_speedup=cold_s / cached_s,
        speedup=verdict["timed"]["speedup"], stage_seconds=with_other(verdict, wall_s),
    )  # fmt: skip


def with_other(verdict: dict[str, Any], wall_s: float) -> dict[str, float]:
    stages = dict(verdict["stage_seconds"])
    return {**stages, "other": round(wall_s - sum(stages.values()), 4)}


def compile_times(source: str) -> tuple[float, float]:
    """(a cold compile, the median cached lookup of the same source), in seconds."""
    with (
        tempfile.TemporaryDirectory(prefix="kope-bench-cache-") as cache_dir,
        override_settings(KOPE_BUILD_CACHE_DIR=cache_dir),
    ):
        cold_s = seconds(lambda: compile_kernel(source))
        lookups = [seconds(lambda: compile_kernel(source)) for _ in range(CACHED_LOOKUPS)]
    return cold_s, statistics.median(lookups)


def seconds(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def evaluate(candidate: Candidate, evaluation: EvalSettings,
             baseline_source: str | None = None) -> dict[str, Any]:  # fmt: skip
    try:
        verdict = evaluate_candidate(candidate.operator, candidate.source, evaluation,
                                     baseline_source)  # fmt: skip
    except EvaluationError as error:
        raise BenchmarkError(f"{candidate.slug}: the evaluation failed: {error}") from None
    timed = verdict.get("timed") or {}
    if verdict["status"] != "correct" or not timed.get("ok"):
        reason = verdict["reason"] or timed.get("reason") or "no timing"
        raise BenchmarkError(f"{candidate.slug}: {verdict['status']}: {reason}")
    return verdict


def repeated_timings(candidate: Candidate, repeats: int,
                     evaluation: EvalSettings) -> list[dict[str, Any]]:  # fmt: skip
    """Each evaluation times the candidate beside itself as the baseline as well."""
    return [evaluate(candidate, evaluation, candidate.source)["timed"] for _ in range(repeats)]


def spread(values: list[float]) -> list[float]:
    middle = statistics.median(values)
    return [abs(v / middle - 1) for v in values]


# --- the plain report -------------------------------------------------------------------------


def evaluator_table(report: dict[str, Any]) -> str:
    settings = report["settings"]
    header = (
        f"{'candidate':<14}{'wall s':>9}{'work s':>9}{'overhead':>10}"
        f"{'cold ms':>10}{'cached ms':>11}{'cache x':>10}{'speedup':>9}"
    )
    rows = [
        f"{c['slug']:<14}{c['wall_s']:>9.2f}{c['candidate_work_s']:>9.3f}"
        f"{c['overhead_fraction']:>10.2f}{c['cold_compile_s'] * 1e3:>10.1f}"
        f"{c['cached_lookup_s'] * 1e3:>11.3f}{c['compile_cache_speedup']:>10.0f}"
        f"{c['speedup']:>9.3f}"
        for c in report["candidates"]
    ]
    spread_of = report["spread"]
    stages = [f"{c['slug']:<14}{stage_seconds_text(c['stage_seconds'])}"
              for c in report["candidates"]]  # fmt: skip
    return "\n".join([
        f"Evaluator benchmark: naive kernels, seeds={settings['seeds']} "
        f"warmup={settings['warmup']} repeats={settings['repeats']} "
        f"threads={settings['threads']} (fewer timed repeats than an evaluation's default, "
        "to keep the run short)",
        "",
        header,
        *rows,
        "",
        "seconds by stage (timing includes the reference's timed calls and the harness's start):",
        *stages,
        "",
        f"overhead_fraction      {report['overhead_fraction']:.2f}  (median; wall time of a "
        "full evaluation beyond the candidate's timed samples, per unit of them)",
        f"compile_cache_speedup  {report['compile_cache_speedup']:.0f}x  (median; cold compile "
        "/ cached lookup)",
        f"spread_median          {report['spread_median']:.3f}  (|speedup / median - 1| over "
        f"{len(spread_of['speedups'])} evaluations of {spread_of['slug']})",
        f"spread_p90             {report['spread_p90']:.3f}",
        f"latency_spread_median  {report['latency_spread_median']:.3f}  (|latency / median - 1| "
        "over the same evaluations)",
        f"latency_spread_p90     {report['latency_spread_p90']:.3f}",
        f"baseline_spread_median {report['baseline_spread_median']:.3f}  (|vs_baseline - 1|, the "
        "candidate timed beside itself in each evaluation)",
        f"baseline_spread_p90    {report['baseline_spread_p90']:.3f}",
        f"medians_baseline_spread_median {report['medians_baseline_spread_median']:.3f}  (the "
        "same from the ratio of the two medians instead of the median of per-order ratios)",
        f"medians_baseline_spread_p90    {report['medians_baseline_spread_p90']:.3f}",
    ])  # fmt: skip


BENCHMARKS: dict[str, Benchmark] = {
    "evaluator": Benchmark(run=evaluator_benchmark, render=evaluator_table),
}
