"""`manage.py bench kernels`: the offline policy over the built-in suite, and what memory does
for it, as three figures measured in one run (see apps/benchmarks/learning.py for two of them).

1. Learning (`memory_effect`): a blank-prior offline policy without memory and with memory
   written by an earlier run over the other operator families (leave-one-family-out).
2. The default policy (`memory_effect_default`): with its written-in prior, memory read-write
   and then off, one session after the other in a fresh team. Per operator it reports the naive
   starting kernel's latency, the best kernel's latency, the speedup over the naive start
   (SAGE's self-acceleration), the speedup over PyTorch eager (the evaluator times both
   alternately on the same inputs), whether it beats PyTorch, the rounds used, and the round
   that made the best kernel. Its memory effect is the geometric mean over operators of best
   latency with memory off / with memory on (> 1: memory helped).
3. Search saved (`rounds_saved_ratio`): the default policy a second time in the same team, with
   the first read-write run's memory: rounds to reach the first run's best kernel.

Every ratio it reports is measured side by side: at the end each pair of kernels (best over
start per mode, best with memory on over best with memory off) is timed again in one process,
taking turns (see side_by_side_ratios). The sessions' own ratios divide latencies from
evaluations minutes apart; they are kept as `..._as_recorded`. Where the two modes ended on
different kernels, the three pairs check each other (see disagreement).

`host_parallel_speedup` probes the host before, between and after the sessions (apps/devices/
host.py): how much faster a matrix product ran on every core than on one. Well under the core
count, another tenant held a core, and every parallel kernel's figures from then are low.
`host_steal_share` is the share of CPU time the hypervisor gave to other guests during each
phase (None off Linux): a host slow on every core alike, which the probe cannot see.
"""

from __future__ import annotations

import csv
import functools
import io
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from apps.accounts.models import Team
from apps.benchmarks.evaluator import Benchmark, BenchmarkError, BenchOptions
from apps.benchmarks.learning import learning_figure, search_saved
from apps.benchmarks.sessions import (
    KernelsOptions,
    OperatorResult,
    bench_team,
    best_case,
    first_case,
    geomean,
    latency_ratio,
    mean_of,
    operator_results,
    ratio_of,
    run_session,
    same_kernel,
    side_by_side,
)
from apps.benchmarks.tokens import context_economy
from apps.devices.host import cpu_ticks, parallel_speedup, steal_share
from apps.memory.models import Case, JournalEvent
from apps.memory.selectors import rule_candidates_overview
from apps.operators.models import Suite
from apps.operators.services import builtin_suite_load
from apps.runs.evaluators import evaluate_here_since
from apps.runs.models import OptimizationSession

MODES = ("read_write", "off")


def kernels_benchmark(options: BenchOptions, kernels: KernelsOptions) -> dict[str, Any]:
    options.progress("storing the built-in suite (first run only)")
    suite = builtin_suite_load()
    slugs = list(dict.fromkeys(kernels.operators or suite_slugs(suite)))  # a session runs each once
    unknown = sorted(set(slugs) - set(suite_slugs(suite)))
    if unknown:
        raise BenchmarkError(f"--operators: not built-in operators: {', '.join(unknown)}")
    team = bench_team(kernels.team)
    known_before = Case.objects.filter(session__team=team).count()
    started, since = time.monotonic(), timezone.now()
    results: dict[str, list[OperatorResult]] = {}
    sessions = {}
    host, steal = {"before": parallel_speedup()}, {}
    for mode in MODES:
        ticks = cpu_ticks()
        session = run_session(team, slugs, mode, kernels, options.progress, since)
        steal[f"memory_{mode}"] = steal_share(ticks, cpu_ticks())
        sessions[mode] = session.pk
        results[mode] = operator_results(session, slugs, mode, kernels.rounds)
        host[f"after_memory_{mode}"] = parallel_speedup()
    ticks = cpu_ticks()
    paired = side_by_side_ratios(sessions, slugs, kernels, options.progress)
    steal["side_by_side"] = steal_share(ticks, cpu_ticks())
    host["after_side_by_side"] = parallel_speedup()
    report = summary(results, paired, same_best_kernels(sessions, slugs), slugs)
    ticks = cpu_ticks()
    again = run_session(team, slugs, "read_write", kernels, options.progress, since)
    sessions["read_write_again"] = again.pk
    saved = search_saved(sessions["read_write"], again.pk, slugs, kernels.rounds)
    steal["second_run"] = steal_share(ticks, cpu_ticks())
    ticks = cpu_ticks()
    learning = learning_figure(slugs=slugs, families=families_of(suite), kernels=kernels,
                               progress=options.progress, since=since)  # fmt: skip
    steal["learning"] = steal_share(ticks, cpu_ticks())
    host["after_learning"] = parallel_speedup()
    report.update(memory_effect=learning["memory_effect"], learning=learning,
                  rounds_saved_ratio=saved["rounds_saved_ratio"], search_saved=saved,
                  rule_candidates=rule_candidates(team),
                  token_economy=token_economy(sessions["read_write"]))  # fmt: skip
    report.update(host_parallel_speedup=host | {"cores": os.cpu_count() or 1},
                  host_steal_share=steal)  # fmt: skip
    report.update(team=team.slug, team_cases_before=known_before, sessions=sessions,
                  wall_s=time.monotonic() - started,
                  settings=asdict(kernels) | {"out_dir": str(kernels.out_dir or "")})  # fmt: skip
    report["files"] = write_tables(report, kernels.out_dir or default_out_dir())
    return report


def token_economy(session_id: int) -> dict[str, Any] | None:
    """The session's active against passive prompt tokens; None when no round assembled a
    context (a one-round run only judges the starting kernels)."""
    assembled = JournalEvent.objects.filter(session_id=session_id, kind="context_assembled")
    return context_economy([session_id]) if assembled.exists() else None


def rule_candidates(team: Team) -> dict[str, Any]:
    """The rules UGC proposed from the default policy's read-write runs: how many, how many
    were adopted (with improvement) on three operators or more, and each one's wording."""
    rules = rule_candidates_overview(team)
    return {
        "proposed": len(rules),
        "adopted_on_3_or_more_operators": sum(rule["operators"] >= 3 for rule in rules),
        "rules": rules,
    }


def families_of(suite: Suite) -> dict[str, str]:
    entries = suite.entries.select_related("operator")
    return {entry.operator.slug: entry.operator.family for entry in entries}


def suite_slugs(suite: Suite) -> list[str]:
    return [entry.operator.slug for entry in suite.entries.select_related("operator")]


def default_out_dir() -> Path:
    return Path(settings.DATA_DIR) / "bench"


def mode_summary(results: list[OperatorResult]) -> dict[str, Any]:
    n = len(results)
    return {
        "pass_rate": sum(r.correct for r in results) / n,
        # the geometric means are over the operators that ended with a correct, timed kernel
        "geomean_operators": sum(bool(r.speedup_vs_naive) for r in results),
        "geomean_speedup_vs_naive": geomean([r.speedup_vs_naive or 0 for r in results]),
        "geomean_speedup_vs_reference": geomean([r.speedup_vs_reference or 0 for r in results]),
        "fraction_faster_than_reference": sum(r.beats_reference for r in results) / n,
        "median_self_acceleration": statistics.median(r.speedup_vs_naive or 0 for r in results),
        "rounds_used": sum(r.rounds_used for r in results),
        "mean_rounds_to_best": mean_of(r.rounds_to_best for r in results),
    }


Ratios = dict[str, dict[str, float | None]]  # per operator: "on", "off", "memory"


def summary(results: dict[str, list[OperatorResult]], paired: Ratios, same: dict[str, bool],
            slugs: list[str]) -> dict[str, Any]:  # fmt: skip
    """Per operator and per mode, the figures with every ratio as measured side by side; the
    ratios as the sessions recorded them sit beside them (`..._as_recorded`). `same`: whether
    both modes ended on the same kernel (there memory can only have saved rounds)."""
    on = {r.operator: r for r in results["read_write"]}
    off = {r.operator: r for r in results["off"]}
    on_beside = {s: measured_beside(on[s], paired[s]["on"]) for s in slugs}
    off_beside = {s: measured_beside(off[s], paired[s]["off"]) for s in slugs}
    recorded_memory = {s: latency_ratio(off[s], on[s]) for s in slugs}
    memory = {s: first_known(paired[s]["memory"], recorded_memory[s]) for s in slugs}
    operators = []
    for slug in slugs:
        row = asdict(on_beside[slug]) | {"speedup_vs_naive_as_recorded": on[slug].speedup_vs_naive}
        row.pop("mode")
        row["memory_off"] = {
            k: v for k, v in asdict(off_beside[slug]).items() if k not in ("operator", "mode")
        } | {"speedup_vs_naive_as_recorded": off[slug].speedup_vs_naive}
        row["memory_ratio"] = memory[slug]
        row["memory_ratio_as_recorded"] = recorded_memory[slug]
        row["same_best_kernel"] = same[slug]
        row["side_by_side_disagreement"] = disagreement(paired[slug], same[slug])
        operators.append(row)
    return {
        "operators": operators,
        "memory_on": mode_figures(list(on_beside.values()), results["read_write"]),
        "memory_off": mode_figures(list(off_beside.values()), results["off"]),
        "memory_effect_default": geomean([memory[s] or 0 for s in slugs]),
        "memory_effect_default_as_recorded": geomean([recorded_memory[s] or 0 for s in slugs]),
        "memory_effect_default_by_round": memory_effect_by_round(on, off, slugs),
        "operators_with_the_same_best_kernel": sum(same[s] for s in slugs),
        "side_by_side_consistency": consistency([row["side_by_side_disagreement"]
                                                 for row in operators], slugs),
    }  # fmt: skip


def disagreement(ratios: dict[str, float | None], same: bool) -> float | None:
    """How far an operator's three side-by-side ratios fail to agree, as a factor >= 1: best
    with memory on over best with memory off timed directly, against the same ratio through
    the start (on over start / off over start). Each pair is timed in one process, but the
    pairs minutes apart: on a quiet host the factor is near 1, and any headline ratio carries
    about as much noise. None where both modes ended on the same kernel (nothing to compare)
    or a pair could not be timed."""
    on, off, memory = ratios["on"], ratios["off"], ratios["memory"]
    if same or not (on and off and memory):
        return None
    return math.exp(abs(math.log(on / off / memory)))


def consistency(factors: list[float | None], slugs: list[str]) -> dict[str, Any]:
    """The operators' disagreement factors summed up: how many could be checked, their median
    and the worst."""
    checked = {slug: f for slug, f in zip(slugs, factors, strict=True) if f is not None}
    worst = max(checked, key=checked.__getitem__, default=None)
    return {
        "operators_checked": len(checked),
        "median_disagreement": statistics.median(checked.values()) if checked else None,
        "worst_operator": worst,
        "worst_disagreement": checked[worst] if worst else None,
    }


RECORDED_FIGURES = ("geomean_speedup_vs_naive", "median_self_acceleration")


def mode_figures(beside: list[OperatorResult], recorded: list[OperatorResult]) -> dict[str, Any]:
    as_recorded = mode_summary(recorded)
    return mode_summary(beside) | {"as_recorded": {k: as_recorded[k] for k in RECORDED_FIGURES}}


def measured_beside(result: OperatorResult, ratio: float | None) -> OperatorResult:
    """`result` with its speedup over the start as timed side by side. Where the pair could not
    be timed in one process, the session's own ratio stands."""
    return result if ratio is None else replace(result, speedup_vs_naive=ratio)


def first_known(*values: float | None) -> float | None:
    return next((value for value in values if value is not None), None)


def memory_effect_by_round(on: dict[str, OperatorResult], off: dict[str, OperatorResult],
                           slugs: list[str]) -> list[float | None]:  # fmt: skip
    """The memory effect had the sessions stopped after round 1, 2, ...: the geometric mean of
    the incumbents' latencies then, off / on. Memory written by an earlier operator is what its
    whole session wrote, so it reads how much sooner memory gets there, not what a session of
    that budget would find."""
    rounds = max((len(on[slug].best_ms_by_round) for slug in slugs), default=0)
    return [
        geomean([ratio_of(off[slug].best_ms_by_round[k], on[slug].best_ms_by_round[k]) or 0
                 for slug in slugs])
        for k in range(rounds)
    ]  # fmt: skip


# --- side by side: each ratio measured with both kernels in one process ----------------------
#
# The sessions' ratios divide latencies measured in different evaluations, minutes apart; on a
# shared host those drift by more than many gains, and the best kernel is the one whose own
# measurement happened to come out lowest. So at the end each ratio is measured again with both
# kernels in one process, taking turns (the evaluator's baseline): best over start for each
# mode, and best with memory on over best with memory off. Every pair is timed afresh, even a
# best kernel its session timed beside the start: that evaluation is the one that made it the
# incumbent, so it is selected for having come out fast (or, once, was taken while a core was
# busy elsewhere: axpby's best read 1.31x there and 2.1x in the other mode's session).


def side_by_side_ratios(sessions: dict[str, int], slugs: list[str], kernels: KernelsOptions,
                        progress: Callable[[str], None]) -> Ratios:  # fmt: skip
    """Per operator: "on" and "off", best over start in that mode; "memory", best with memory
    on over best with memory off. None where one process cannot run the pair as it ran."""
    evaluate = evaluate_here_since(timezone.now())  # within this phase, a pair is timed once
    session = OptimizationSession.objects.get(pk=sessions["read_write"])
    ratios: Ratios = {}
    for slug in slugs:
        start = first_case(sessions["read_write"], slug)
        best = {mode: best_case(sessions[mode], slug) for mode in MODES}
        progress(f"side by side: {slug}")
        pair = functools.partial(side_by_side, evaluate, session, kernels)
        ratios[slug] = {"on": pair(best["read_write"], start), "off": pair(best["off"], start),
                        "memory": pair(best["read_write"], best["off"])}  # fmt: skip
    return ratios


def same_best_kernels(sessions: dict[str, int], slugs: list[str]) -> dict[str, bool]:
    """Per operator, whether memory on and off ended on the same kernel (source, flags and
    threads)."""
    return {slug: same_kernel(best_case(sessions["read_write"], slug),
                              best_case(sessions["off"], slug)) for slug in slugs}  # fmt: skip


# --- tables ------------------------------------------------------------------------------------

COLUMNS = ("operator", "correct", "start_ms", "best_ms", "speedup_vs_naive",
           "speedup_vs_naive_as_recorded", "speedup_vs_reference", "beats_reference",
           "rounds_used", "rounds_to_best")  # fmt: skip


def csv_text(report: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["mode", *COLUMNS, "best_strategy_chain", "stop_reason"])
    for row in report["operators"]:
        for mode, values in (("memory_on", row), ("memory_off", row["memory_off"])):
            merged = {**values, "operator": row["operator"]}
            writer.writerow([mode, *(merged[c] for c in COLUMNS),
                             merged["best_strategy_chain"], merged["stop_reason"]])  # fmt: skip
    return out.getvalue()


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(report: dict[str, Any]) -> str:
    lines = [
        "| operator | naive ms | best ms (on) | x naive (on) | x PyTorch (on) | beats PyTorch "
        "| rounds | best at (on) | best ms (off) | x naive (off) | best at (off) | off/on "
        "| same kernel |",
        "|---|---:|---:|---:|---:|:-:|---:|---:|---:|---:|---:|---:|:-:|",
    ]
    for row in report["operators"]:
        off = row["memory_off"]
        lines.append(
            f"| {row['operator']} | {fmt(row['start_ms'], 3)} | {fmt(row['best_ms'], 3)} "
            f"| {fmt(row['speedup_vs_naive'])} | {fmt(row['speedup_vs_reference'])} "
            f"| {fmt(row['beats_reference'])} | {row['rounds_used']} "
            f"| {fmt(row['rounds_to_best'])} | {fmt(off['best_ms'], 3)} "
            f"| {fmt(off['speedup_vs_naive'])} | {fmt(off['rounds_to_best'])} "
            f"| {fmt(row['memory_ratio'])} | {fmt(row['same_best_kernel'])} |"
        )
    lines += ["", "| | memory on | memory off |", "|---|---:|---:|"]
    for key in (
        "pass_rate",
        "geomean_speedup_vs_naive",
        "geomean_speedup_vs_reference",
        "fraction_faster_than_reference",
        "median_self_acceleration",
        "rounds_used",
        "mean_rounds_to_best",
    ):
        lines.append(f"| {key} | {fmt(report['memory_on'][key])} "
                     f"| {fmt(report['memory_off'][key])} |")  # fmt: skip
    lines.append(f"\nmemory effect of the default policy (geomean best latency off / on): "
                 f"{fmt(report['memory_effect_default'])}")  # fmt: skip
    lines.append(f"both modes ended on the same kernel (source, flags, threads) for "
                 f"{report['operators_with_the_same_best_kernel']} of {len(report['operators'])} "
                 "operators: there memory can only have saved rounds (best at)")  # fmt: skip
    lines.append(consistency_line(report["side_by_side_consistency"]))
    lines += ["", *recorded_table(report)]
    if "learning" in report:
        lines += ["", *learning_table(report["learning"]), "", search_saved_line(report)]
        lines += ["", *rules_lines(report["rule_candidates"]), "", tokens_line(report)]
    if "host_parallel_speedup" in report:
        lines += ["", host_line(report["host_parallel_speedup"])]
    if "host_steal_share" in report:
        lines.append(steal_line(report["host_steal_share"]))
    return "\n".join(lines)


def consistency_line(agreement: dict[str, Any]) -> str:
    if not agreement["operators_checked"]:
        return ("side-by-side consistency: not checked (no operator ended on different kernels "
                "in the two modes)")  # fmt: skip
    return (
        f"side-by-side consistency: on the {agreement['operators_checked']} operators whose "
        "modes ended on different kernels, memory on over off timed directly and through the "
        f"start disagreed by a median factor of {fmt(agreement['median_disagreement'])} "
        f"(worst: {agreement['worst_operator']}, {fmt(agreement['worst_disagreement'])}); each "
        "ratio above carries noise of that order"
    )


def host_line(host: dict[str, Any]) -> str:
    probes = ", ".join(f"{fmt(value)}x {when.replace('_', ' ')}" for when, value in host.items()
                       if when != "cores")  # fmt: skip
    return (
        f"Host: a matrix product on {host['cores']} cores ran {probes} as fast as on one "
        f"(a figure well under {host['cores']} means another tenant held a core then, and the "
        "parallel kernels' figures from that time are low)."
    )


def steal_line(steal: dict[str, float | None]) -> str:
    shares = ", ".join(f"{fmt_share(share)} ({phase.replace('_', ' ')})"
                       for phase, share in steal.items())  # fmt: skip
    return (
        "Steal: the share of this machine's CPU time the hypervisor gave to other guests: "
        f"{shares}. Well above 0%, every kernel ran slower than on a quiet host, serial ones too."
    )


def fmt_share(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def recorded_table(report: dict[str, Any]) -> list[str]:
    lines = [
        "Every ratio above was timed side by side, both kernels in one process at the end of the "
        "run. As the sessions recorded them (latencies from evaluations minutes apart):",
        "",
        "| operator | x naive (on) | x naive (off) | off/on |",
        "|---|---:|---:|---:|",
    ]
    for row in report["operators"]:
        lines.append(f"| {row['operator']} | {fmt(row['speedup_vs_naive_as_recorded'])} "
                     f"| {fmt(row['memory_off']['speedup_vs_naive_as_recorded'])} "
                     f"| {fmt(row['memory_ratio_as_recorded'])} |")  # fmt: skip
    on, off = report["memory_on"]["as_recorded"], report["memory_off"]["as_recorded"]
    effects = enumerate(report["memory_effect_default_by_round"], 1)
    by_round = ", ".join(f"{k}: {fmt(effect)}" for k, effect in effects)
    return [
        *lines,
        "",
        f"median self-acceleration: {fmt(on['median_self_acceleration'])} (on), "
        f"{fmt(off['median_self_acceleration'])} (off); geomean x naive: "
        f"{fmt(on['geomean_speedup_vs_naive'])} (on), "
        f"{fmt(off['geomean_speedup_vs_naive'])} (off); memory effect: "
        f"{fmt(report['memory_effect_default_as_recorded'])}",
        f"memory effect had the sessions stopped after round k (k: effect): {by_round}",
    ]


def learning_table(learning: dict[str, Any]) -> list[str]:
    lines = [
        f"Learning: {learning['setting']}.",
        "",
        "| operator | family | best ms (no memory) | best ms (other families' memory) "
        "| off/on | best at (off) | best at (on) | proposals adopting memory |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in learning["operators"]:
        lines.append(
            f"| {row['operator']} | {row['family']} | {fmt(row['best_ms_off'], 3)} "
            f"| {fmt(row['best_ms_on'], 3)} | {fmt(row['memory_ratio'])} "
            f"| {fmt(row['rounds_to_best_off'])} | {fmt(row['rounds_to_best_on'])} "
            f"| {fmt_share(row['share_of_proposals_adopting_memory'])} |"
        )
    return [
        *lines,
        "",
        f"memory effect, learning (geomean best latency off / on, side by side): "
        f"{fmt(learning['memory_effect'])} ({learning['operators_improved']} operators faster "
        f"with memory, {learning['operators_worse']} slower, by more than 5%)",
    ]


def search_saved_line(report: dict[str, Any]) -> str:
    saved = report["search_saved"]
    return (
        f"search saved: the default policy's second run, with the first's memory, reached the "
        f"first run's best kernel in {saved['rounds_second_run']} rounds against "
        f"{saved['rounds_first_run']} over {saved['operators_compared']} operators "
        f"({saved['operators_not_reached']} not reached): rounds_saved_ratio "
        f"{fmt(saved['rounds_saved_ratio'])}"
    )


def tokens_line(report: dict[str, Any]) -> str:
    economy = report["token_economy"]
    if economy is None:
        return "Prompt tokens: no round assembled a context (one round judges only the start)"
    return (
        f"Prompt tokens, the default policy's read-write session: passive context "
        f"{economy['passive_tokens']:,} against active {economy['active_tokens']:,} over "
        f"{economy['iterations']} iterations: {fmt(economy['active_vs_passive_token_ratio'])}x "
        f"fewer ({economy['setting']})"
    )


def rules_lines(candidates: dict[str, Any]) -> list[str]:
    lines = [
        f"Rule candidates after the default policy's read-write runs: {candidates['proposed']}, "
        f"{candidates['adopted_on_3_or_more_operators']} of them adopted with improvement on 3 "
        "operators or more:",
        "",
    ]
    for rule in candidates["rules"]:
        lines.append(f"- rule {rule['rule']} ({rule['status']}, {rule['operators']} operators): "
                     f"{rule['statement']}")  # fmt: skip
    return lines


def write_tables(report: dict[str, Any], out_dir: Path) -> dict[str, str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"kernels-{timezone.now():%Y%m%d-%H%M%S}"
    md, table = stem.with_suffix(".md"), stem.with_suffix(".csv")
    md.write_text(markdown_table(report) + "\n")
    table.write_text(csv_text(report))
    return {"markdown": str(md), "csv": str(table)}


def render(report: dict[str, Any]) -> str:
    return (f"{markdown_table(report)}\n\nsessions {report['sessions']} in team "
            f"{report['team']} (which held {report['team_cases_before']} cases before); "
            f"{report['wall_s']:.0f} s; tables: {report['files']['markdown']}, "
            f"{report['files']['csv']}")  # fmt: skip


def kernels_benchmark_for(kernels: KernelsOptions) -> Benchmark:
    return Benchmark(run=lambda options: kernels_benchmark(options, kernels), render=render)
