"""`manage.py bench suite PATH`: a public suite end to end, as a new user would run it.

The folder is imported into a fresh team (the same importer, sandbox and report as
`import_suite`; the import lowers each reference to a naive starting kernel), then one
session of the offline policy (memory read-write, so what one problem teaches the next can
use) runs every imported problem, in this process. Per problem it reports whether it
imported, whether a starting kernel was generated and judged correct, whether the session
ended with a correct kernel, the speedup over that start (self-acceleration, timed again side
by side at the end, as `bench kernels` does) and over PyTorch eager, and the rounds used.

The overall figures are over every problem the folder holds (a problem that did not import
counts as failed): `imported_fraction`, `lowered_fraction` (a starting kernel was generated),
`start_correct_fraction`, and `bench kernels`' keys (`pass_rate`, `median_self_acceleration`,
`fraction_faster_than_reference`, ...), plus the median self-acceleration and the share faster
than PyTorch among the problems that passed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from django.utils import timezone

from apps.accounts.models import Team
from apps.benchmarks.evaluator import Benchmark, BenchmarkError, BenchOptions
from apps.benchmarks.kernels import fmt, mode_summary
from apps.benchmarks.sessions import (
    KernelsOptions,
    OperatorResult,
    best_case,
    first_case,
    operator_results,
    run_session,
    side_by_side,
)
from apps.operators.importing import (
    IMPORTED,
    SKIPPED,
    UNCHANGED,
    ImportRequestError,
    import_execute,
    import_start,
)
from apps.operators.models import ImportRun, OperatorVersion
from apps.runs.evaluators import evaluate_here_since
from apps.runs.models import OptimizationSession

MODE = "read_write"
TARGET = "cpu-c"


@dataclass(frozen=True)
class SuiteOptions:
    path: str
    fmt: str | None = None  # None: detected from the folder's layout
    scale: float = 1.0
    operators: list[str] | None = None  # None: every problem the import stored
    rounds: int = 10
    repeats: int = 30  # timed calls per evaluation


@dataclass(frozen=True)
class Problem:
    """One problem of the folder: what the import and the session made of it."""

    problem: str
    operator: str
    imported: bool
    import_note: str
    lowered: bool
    start_correct: bool | None  # None: no starting kernel was judged


def suite_benchmark(options: BenchOptions, suite: SuiteOptions) -> dict[str, Any]:
    started, since = time.monotonic(), timezone.now()
    team = Team.objects.create(name=f"bench suite {timezone.now():%Y-%m-%d %H:%M:%S}",
                               slug=f"bench-suite-{time.time_ns()}")  # fmt: skip
    run = imported_run(team, suite, options.progress)
    problems = [problem_of(line, team) for line in run.report if line["outcome"] != SKIPPED]
    if not problems:
        raise BenchmarkError(f"{suite.path} holds no problem to import")
    chosen = [p for p in problems if p.imported and wanted(p, suite.operators)]
    results: dict[str, OperatorResult] = {}
    session_id = None
    if chosen:
        kernels = KernelsOptions(rounds=suite.rounds, repeats=suite.repeats, seeds=3)
        slugs = [p.operator for p in chosen]
        session = run_session(team, slugs, MODE, kernels, options.progress, since)
        session_id = session.pk
        results = measured_results(session, slugs, kernels, options.progress)
        problems = [with_start_verdict(p, session.pk) if p.operator in results else p
                    for p in problems]  # fmt: skip
    rows = [row_of(p, results.get(p.operator)) for p in problems]
    report = overall(rows, [results.get(p.operator) or failed_result(p) for p in problems])
    report.update(operators=rows, team=team.slug, import_run=run.pk, session=session_id,
                  wall_s=time.monotonic() - started,
                  settings=asdict(suite) | {"format": run.format})  # fmt: skip
    return report


def imported_run(team: Team, suite: SuiteOptions, progress: Callable[[str], None]) -> ImportRun:
    try:
        run = import_start(path=suite.path, fmt=suite.fmt, scale=suite.scale, team=team,
                           user=None, restrict=False)  # fmt: skip
    except ImportRequestError as error:
        raise BenchmarkError(f"{error.field}: {error.message}") from None
    progress(f"importing {run.path} as {run.format} (scale {run.scale:g})")
    run = import_execute(run, on_progress=lambda r, line: progress(
        f"import {r.done}/{r.total}: {line.problem}: {line.outcome}"))  # fmt: skip
    if run.status != ImportRun.Status.DONE:
        raise BenchmarkError(f"the import ended {run.status}: {run.error}")
    return run


def problem_of(line: dict[str, Any], team: Team) -> Problem:
    imported = line["outcome"] in (IMPORTED, UNCHANGED)
    version = newest_version(team, line["operator"]) if imported else None
    lowered = version is not None and version.starting_kernels.filter(target=TARGET).exists()
    return Problem(problem=line["problem"], operator=line["operator"], imported=imported,
                   import_note=line["reason"],
                   lowered=lowered, start_correct=None)  # fmt: skip


def newest_version(team: Team, slug: str) -> OperatorVersion | None:
    return (OperatorVersion.objects.filter(operator__team=team, operator__slug=slug)
            .order_by("-number").first())  # fmt: skip


def wanted(problem: Problem, operators: list[str] | None) -> bool:
    return operators is None or problem.operator in operators or problem.problem in operators


def measured_results(session: OptimizationSession, slugs: list[str], kernels: KernelsOptions,
                     progress: Callable[[str], None]) -> dict[str, OperatorResult]:  # fmt: skip
    """Each problem's figures, its speedup over the start timed again side by side with both
    kernels in one process (the session's own ratio divides evaluations minutes apart)."""
    evaluate = evaluate_here_since(timezone.now())
    results = {}
    for result in operator_results(session, slugs, MODE, kernels.rounds):
        progress(f"side by side: {result.operator}")
        slug = result.operator
        ratio = side_by_side(evaluate, session, kernels, best_case(session.pk, slug),
                             first_case(session.pk, slug))  # fmt: skip
        results[result.operator] = result if ratio is None else replace(
            result, speedup_vs_naive=ratio)  # fmt: skip
    return results


def with_start_verdict(problem: Problem, session_id: int) -> Problem:
    """Whether the session judged the starting kernel correct (its first case)."""
    start = first_case(session_id, problem.operator)
    if start is None or start.iteration != 0:
        return problem
    return replace(problem, start_correct=start.correct)


def failed_result(problem: Problem) -> OperatorResult:
    return OperatorResult(operator=problem.operator or problem.problem, mode=MODE, correct=False,
                          start_ms=None, best_ms=None, speedup_vs_naive=None,
                          speedup_vs_reference=None, beats_reference=False, rounds_used=0,
                          rounds_to_best=None, best_strategy_chain="",
                          stop_reason=problem.import_note or "not run")  # fmt: skip


def row_of(problem: Problem, result: OperatorResult | None) -> dict[str, Any]:
    figures = asdict(result or failed_result(problem))
    for key in ("mode", "best_ms_by_round", "operator"):
        figures.pop(key)
    return asdict(problem) | figures


def overall(rows: list[dict[str, Any]], results: list[OperatorResult]) -> dict[str, Any]:
    total = len(rows)
    passing = [r for r in results if r.correct]
    return mode_summary(results) | {
        "problems": total,
        "imported_fraction": sum(r["imported"] for r in rows) / total,
        "lowered_fraction": sum(r["lowered"] for r in rows) / total,
        "start_correct_fraction": sum(bool(r["start_correct"]) for r in rows) / total,
        "median_self_acceleration_of_passing": (
            statistics.median(r.speedup_vs_naive or 0 for r in passing) if passing else None
        ),
        "fraction_of_passing_faster_than_reference": (
            sum(r.beats_reference for r in passing) / len(passing) if passing else None
        ),
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        "| problem | imported | start generated | start correct | correct | x start "
        "| x PyTorch | rounds | note |",
        "|---|:-:|:-:|:-:|:-:|---:|---:|---:|---|",
    ]
    for row in report["operators"]:
        lines.append(
            f"| {row['problem']} | {fmt(row['imported'])} | {fmt(row['lowered'])} "
            f"| {fmt(row['start_correct'])} | {fmt(row['correct'])} "
            f"| {fmt(row['speedup_vs_naive'])} | {fmt(row['speedup_vs_reference'])} "
            f"| {row['rounds_used']} | {note_of(row)} |"
        )
    lines.append("")
    for key in ("problems", "imported_fraction", "lowered_fraction", "start_correct_fraction",
                "pass_rate", "median_self_acceleration", "median_self_acceleration_of_passing",
                "fraction_faster_than_reference", "fraction_of_passing_faster_than_reference",
                "geomean_speedup_vs_naive", "rounds_used"):  # fmt: skip
        lines.append(f"{key}: {fmt(report[key])}")
    lines.append(f"team {report['team']}, import run {report['import_run']}, session "
                 f"{report['session']}; {report['wall_s']:.0f} s")  # fmt: skip
    return "\n".join(lines)


def note_of(row: dict[str, Any]) -> str:
    text = str(row["import_note"] if not row["imported"] else row["stop_reason"])
    return text.replace("|", "/").replace("\n", " ")[:120]


def suite_benchmark_for(suite: SuiteOptions) -> Benchmark:
    return Benchmark(run=lambda options: suite_benchmark(options, suite), render=render)
