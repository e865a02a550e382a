"""What memory teaches, and what it saves: the two figures of `bench kernels` beside the
default policy's memory effect.

Learning (`memory_effect`): a blank-prior offline policy, which knows no strategy order, no
preferred parameters and no compiler cost model, in KOPE's setting of memory written by
earlier runs, held out one operator family at a time. In a fresh team the suite runs once
with memory off; its attempts are then stored as memory (embedded, as a learning session's
are). That run is the baseline. The suite runs again, memory read-only, each operator
recalling only the cases of other families from the earlier run (leave-one-family-out: no
operator sees its own cases, nor its family's, nor this run's). Both runs have the same seed
and round budget, so where memory brought nothing they make the same moves. The figure is the
geometric mean over operators of best latency without memory / with it, each pair timed side
by side.

Search saved (`rounds_saved_ratio`): the default policy runs the suite a second time with the
team's memory from its first run (SAGE's transfer setting). Per operator whose first run
improved on the start, the rounds the first run took to make its best kernel, and the rounds
the second took to reach that kernel (or one at least as fast, as it recorded it); the
figure is their sums' ratio. An operator the second run never brings there counts the whole
budget plus one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Team
from apps.benchmarks.sessions import (
    KernelsOptions,
    OperatorResult,
    best_case,
    geomean,
    incumbents_by_round,
    latency_ratio,
    operator_results,
    ratio_of,
    run_session,
    same_kernel,
    side_by_side,
)
from apps.memory.models import Case, JournalEvent
from apps.memory.retrieval import vector_store_for_case
from apps.runs.evaluators import evaluate_here_since
from apps.runs.models import OptimizationSession

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Held:
    """One operator of the learning figure: its best kernels without and with memory."""

    operator: str
    family: str
    off: Case | None
    on: Case | None


def store_as_memory(session_id: int) -> int:
    """The session's attempts as memory, as a learning session stores its own: one embedded
    item per case. Returns how many were stored."""
    case_ids = list(Case.objects.filter(session_id=session_id).values_list("pk", flat=True))
    for case_id in case_ids:
        with transaction.atomic():
            vector_store_for_case(case_id)
    return len(case_ids)


def learning_team() -> Team:
    return Team.objects.create(name=f"bench learning {timezone.now():%Y-%m-%d %H:%M:%S}",
                               slug=f"bench-learning-{time.time_ns()}")  # fmt: skip


def rounds_to_reach(incumbents: list[Case | None], target: Case, rounds: int) -> int:
    """The first round (1-based) whose incumbent is `target`'s kernel or at least as fast as
    `target` was recorded; `rounds` + 1 when none is."""
    for number, incumbent in enumerate(incumbents, 1):
        if incumbent is not None and (
            same_kernel(incumbent, target)
            or (incumbent.latency_ms is not None and target.latency_ms
                and incumbent.latency_ms <= target.latency_ms)
        ):  # fmt: skip
            return number
    return rounds + 1


def search_saved(first_id: int, second_id: int, slugs: list[str], rounds: int) -> dict[str, Any]:
    """Rounds the first run took to its best kernel against rounds the second run (with the
    first's memory) took to reach it, per operator whose first run improved on its start."""
    per_operator = {}
    for slug in slugs:
        best = best_case(first_id, slug)
        if best is None or not best.iteration:
            continue  # no correct kernel, or the start was the best: nothing to reach
        incumbents = incumbents_by_round(second_id, slug, rounds)
        per_operator[slug] = {
            "first_run": best.iteration,
            "second_run": rounds_to_reach(incumbents, best, rounds),
        }
    first = sum(r["first_run"] for r in per_operator.values())
    second = sum(r["second_run"] for r in per_operator.values())
    return {
        "rounds_saved_ratio": first / second if second else None,
        "operators_compared": len(per_operator),
        "operators_not_reached": sum(r["second_run"] > rounds for r in per_operator.values()),
        "rounds_first_run": first,
        "rounds_second_run": second,
        "by_operator": per_operator,
    }


def learning_figure(*, slugs: list[str], families: dict[str, str], kernels: KernelsOptions,
                    progress: Progress, since: datetime) -> dict[str, Any]:  # fmt: skip
    """The blank-prior policy without memory and with other families' memory, side by side."""
    team = learning_team()
    blank = {"offline_prior": "blank"}
    baseline = run_session(team, slugs, "off", kernels, progress, since, **blank)
    stored = store_as_memory(baseline.pk)
    progress(f"learning: stored the {stored} attempts of the run without memory as memory")
    held_out = run_session(team, slugs, "read_only", kernels, progress, since,
                           memory_scope="other-families", **blank)  # fmt: skip
    off = {r.operator: r for r in operator_results(baseline, slugs, "off", kernels.rounds)}
    on = {r.operator: r for r in operator_results(held_out, slugs, "read_only", kernels.rounds)}
    evaluate = evaluate_here_since(timezone.now())
    rows, ratios = [], []
    for slug in slugs:
        progress(f"learning, side by side: {slug}")
        held = Held(slug, families[slug], best_case(baseline.pk, slug),
                    best_case(held_out.pk, slug))  # fmt: skip
        beside = side_by_side(evaluate, held_out, kernels, held.on, held.off)
        recorded = latency_ratio(off[slug], on[slug])
        ratio = beside if beside is not None else recorded
        ratios.append(ratio or 0)
        rows.append(held_row(held, off[slug], on[slug], ratio, recorded,
                             adopting_share(held_out, slug)))  # fmt: skip
    return {
        "memory_effect": geomean(ratios),
        "setting": "blank-prior offline policy; memory read-only, written by a run without "
        "memory over the suite, each operator recalling only other families' cases "
        "(leave-one-family-out), against that run; same seed and round budget",
        "team": team.slug,
        "sessions": {"off": baseline.pk, "read_only_other_families": held_out.pk},
        "cases_stored_as_memory": stored,
        "operators": rows,
        "geomean_speedup_vs_naive": {
            "off": geomean([r.speedup_vs_naive or 0 for r in off.values()]),
            "read_only": geomean([r.speedup_vs_naive or 0 for r in on.values()]),
        },
        "operators_improved": sum((r or 0) > 1.05 for r in ratios),
        "operators_worse": sum(0 < (r or 0) < 1 / 1.05 for r in ratios),
        "recorded_memory_effect": geomean(
            [ratio_of(off[s].best_ms, on[s].best_ms) or 0 for s in slugs]
        ),
    }


def held_row(held: Held, off: OperatorResult, on: OperatorResult, ratio: float | None,
             recorded: float | None, adopting: float | None) -> dict[str, Any]:  # fmt: skip
    return {
        "operator": held.operator, "family": held.family,
        "best_ms_off": off.best_ms, "best_ms_on": on.best_ms,
        "rounds_to_best_off": off.rounds_to_best, "rounds_to_best_on": on.rounds_to_best,
        "memory_ratio": ratio, "memory_ratio_as_recorded": recorded,
        "best_strategy_chain_off": off.best_strategy_chain,
        "best_strategy_chain_on": on.best_strategy_chain,
        "share_of_proposals_adopting_memory": adopting,
    }  # fmt: skip


def adopting_share(session: OptimizationSession, slug: str) -> float | None:
    """The share of the operator's proposals that named a recalled item as what decided."""
    proposals = JournalEvent.objects.filter(
        session_id=session.pk, kind="candidate_proposed", payload__operator=slug
    ).values_list("payload", flat=True)
    adopted = [bool(p.get("adopted")) for p in proposals]
    return sum(adopted) / len(adopted) if adopted else None
