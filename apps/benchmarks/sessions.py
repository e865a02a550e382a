"""Running the benchmarks' sessions in this process, and reading what they made: the offline
policy over built-in operators (evaluations use the same sandboxed pipeline as the device
workers; only the queue is skipped), each operator's figures from its journal, and two kernels
timed side by side in one process.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from celery import current_app
from django.utils import timezone

from apps.accounts.models import Team
from apps.benchmarks.evaluator import BenchmarkError
from apps.devices.evaluator import EvalSettings
from apps.memory.models import Case, JournalEvent
from apps.operators.models import OperatorVersion
from apps.runs.candidates import candidate_of_case
from apps.runs.config import Budgets, Measurement
from apps.runs.evaluators import Evaluate, baseline_settings, evaluate_here_since, timed_kernel
from apps.runs.loop import advance
from apps.runs.models import OptimizationSession
from apps.runs.policies import policy_for
from apps.runs.recording import replaces_incumbent
from apps.runs.services import session_create


@dataclass(frozen=True)
class KernelsOptions:
    operators: list[str] | None = None  # None: the whole built-in suite, in its order
    rounds: int = 30
    repeats: int = 30  # timed calls per evaluation (the sessions' default is 100)
    seeds: int = 1  # input seeds per test case (sessions default to 3)
    out_dir: Path | None = None
    team: str | None = None  # a team's slug: memory on reads what that team already knows


@dataclass(frozen=True)
class OperatorResult:
    operator: str
    mode: str
    correct: bool
    start_ms: float | None
    best_ms: float | None
    speedup_vs_naive: float | None
    speedup_vs_reference: float | None
    beats_reference: bool
    rounds_used: int
    rounds_to_best: int | None  # the iteration that made the best kernel; 0: the start itself
    best_strategy_chain: str
    stop_reason: str
    # the incumbent's latency after round 1, 2, ...; only the benchmark reads it (a report's
    # rows leave it empty)
    best_ms_by_round: list[float | None] = field(default_factory=list)


def bench_team(slug: str | None) -> Team:
    """A fresh team, so memory on starts from nothing, or the named one, so memory on starts
    from what that team's sessions recorded (KOPE's setting: memory from earlier runs)."""
    if slug is None:
        return Team.objects.create(name=f"bench kernels {timezone.now():%Y-%m-%d %H:%M:%S}",
                                   slug=f"bench-kernels-{time.time_ns()}")  # fmt: skip
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        raise BenchmarkError(f"--team {slug}: no team has that slug")
    return team


def run_session(
    team: Team,
    slugs: list[str],
    mode: str,
    kernels: KernelsOptions,
    progress: Callable[[str], None],
    since: datetime,
    *,
    offline_prior: str = "written-in",
    memory_scope: str = "team",
) -> OptimizationSession:
    blank = ", blank prior" if offline_prior == "blank" else ""
    session = session_create(
        team=team, user=None, operators=slugs, memory_mode=mode, start=False,
        offline_prior=offline_prior, memory_scope=memory_scope,
        label=f"bench kernels, memory {mode}{blank}",
        budgets=Budgets(rounds=kernels.rounds, plateau=kernels.rounds),
        measurement=Measurement(seeds=kernels.seeds, warmup=3, repeats=kernels.repeats),
    )  # fmt: skip
    # Verdicts from before this run are measured again; within the run, the same kernel
    # with memory on and off shares one measurement (a paired comparison).
    evaluate = evaluate_here_since(since)
    shown = ""
    with tasks_run_here():
        while advance(session.pk, evaluate=evaluate, policy_for=policy_for):
            # An advance that closes an operator records no case: nothing new to show.
            if (line := iteration_line(session.pk)) != shown:
                progress(f"memory {mode}{blank}: {line}")
                shown = line
    session.refresh_from_db()
    if session.status != OptimizationSession.Status.FINISHED:
        raise BenchmarkError(f"session {session.pk} ended {session.status}: "
                             f"{session.status_reason}")  # fmt: skip
    return session


@contextmanager
def tasks_run_here() -> Iterator[None]:
    """Celery tasks the loop sends (case embeddings) run in this process, without a line on
    stderr for each: the benchmark's progress lines are the ones to read."""
    conf, trace_log = current_app.conf, logging.getLogger("celery.app.trace")
    eager, level = conf.task_always_eager, trace_log.level
    conf.task_always_eager = True
    trace_log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        conf.task_always_eager = eager
        trace_log.setLevel(level)


def iteration_line(session_id: int) -> str:
    last = (
        JournalEvent.objects.filter(session_id=session_id, kind="case_recorded")
        .order_by("-seq")
        .first()
    )
    if last is None:
        return "starting"
    p = last.payload
    slug = OperatorVersion.objects.filter(pk=p["version_id"]).values_list(
        "operator__slug", flat=True
    )
    latency = f"{p['latency_ms']:.2f} ms" if p.get("latency_ms") else "-"
    return (f"{slug.first()} iteration {p['iteration']} {p['strategy'][:40]} -> "
            f"{p['outcome']} {latency}")  # fmt: skip


def operator_results(session: OptimizationSession, slugs: list[str], mode: str,
                     rounds: int) -> list[OperatorResult]:  # fmt: skip
    finished = {
        e.payload["operator"]: e.payload
        for e in JournalEvent.objects.filter(session_id=session.pk, kind="operator_finished")
    }
    results = []
    for slug in slugs:
        p = finished.get(slug)
        if p is None:
            raise BenchmarkError(f"{slug} did not finish in session {session.pk}")
        best_ref = p["speedup_vs_reference"]
        best = Case.objects.filter(pk=p["best_case_id"]).first() if p["best_case_id"] else None
        results.append(OperatorResult(
            operator=slug, mode=mode, correct=p["best_case_id"] is not None,
            start_ms=p["start_latency_ms"], best_ms=p["best_latency_ms"],
            speedup_vs_naive=p["speedup_vs_start"], speedup_vs_reference=best_ref,
            beats_reference=bool(best_ref and best_ref > 1.0), rounds_used=p["rounds_used"],
            rounds_to_best=best.iteration if best else None,
            best_ms_by_round=incumbent_latencies(session.pk, slug, rounds),
            best_strategy_chain=strategy_chain(best),
            stop_reason=p["reason"],
        ))  # fmt: skip
    return results


def incumbent_latencies(session_id: int, slug: str, rounds: int) -> list[float | None]:
    """The incumbent's latency after each round, 1 to `rounds`, as the session judged it."""
    return [case.latency_ms if case else None
            for case in incumbents_by_round(session_id, slug, rounds)]  # fmt: skip


def incumbents_by_round(session_id: int, slug: str, rounds: int) -> list[Case | None]:
    """The operator's incumbent after each round, 1 to `rounds`, as the session judged it: the
    first correct kernel, then each one judged faster than its parent. Past the rounds an
    operator used, its final best."""
    cases = Case.objects.filter(session_id=session_id, version__operator__slug=slug)
    incumbent, by_round = None, []
    pending = iter(cases.order_by("iteration", "pk"))
    case = next(pending, None)
    for number in range(1, rounds + 1):
        while case is not None and case.iteration <= number:
            if replaces_incumbent(case, incumbent):
                incumbent = case
            case = next(pending, None)
        by_round.append(incumbent)
    return by_round


def strategy_chain(best: Case | None) -> str:
    """The strategies from the best case back to the start ("a <- b")."""
    chain = []
    case = best
    while case is not None and case.parent_id is not None:
        chain.append(case.strategy)
        case = case.parent
    return " <- ".join(chain) or "(the start)"


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def latency_ratio(off: OperatorResult, on: OperatorResult) -> float | None:
    """Best latency with memory off / with memory on (> 1: memory helped)."""
    return ratio_of(off.best_ms, on.best_ms)


def ratio_of(off_ms: float | None, on_ms: float | None) -> float | None:
    return off_ms / on_ms if off_ms and on_ms else None


def same_kernel(case: Case | None, other: Case | None) -> bool:
    if case is None or other is None:
        return False
    return candidate_of_case(case).kernel_key == candidate_of_case(other).kernel_key


def first_case(session_id: int, slug: str) -> Case | None:
    return (Case.objects.filter(session_id=session_id, version__operator__slug=slug)
            .order_by("iteration").first())  # fmt: skip


def best_case(session_id: int, slug: str) -> Case | None:
    finished = JournalEvent.objects.get(session_id=session_id, kind="operator_finished",
                                        payload__operator=slug)  # fmt: skip
    best = finished.payload["best_case_id"]
    return Case.objects.filter(pk=best).first() if best else None


def side_by_side(evaluate: Evaluate, session: OptimizationSession, kernels: KernelsOptions,
                 case: Case | None, baseline: Case | None) -> float | None:  # fmt: skip
    """How many times faster `case`'s kernel ran than `baseline`'s, in one process; None when
    either has no correct, timed kernel or one process cannot run both as they ran."""
    if not timed_kernel(case) or not timed_kernel(baseline):
        return None
    assert case is not None and baseline is not None
    kernel, other = candidate_of_case(case), candidate_of_case(baseline)
    if kernel.kernel_key == other.kernel_key:
        return 1.0
    beside = baseline_settings(kernel, baseline, other)
    if not beside:
        return None
    options = EvalSettings(seeds=kernels.seeds, warmup=3, repeats=kernels.repeats,
                           threads=kernel.threads, extra_flags=tuple(kernel.flags),
                           **beside)  # fmt: skip
    verdict = evaluate(case.version, kernel, options, session).verdict or {}
    return (verdict.get("timed") or {}).get("vs_baseline")


def mean_of(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.fmean(known) if known else None
