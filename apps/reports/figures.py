"""The figures of a report, from rows already read out of the database: no ORM here.

A suite report reads like the papers' tables. Every operator the session was configured with
counts: one that never finished (a stopped or failed session) is a failure, not a gap. The
arithmetic (pass rate, geometric means, fraction faster, median self-acceleration) is the
benchmark's own, apps/benchmarks/kernels.py, so a report agrees with the figures `manage.py bench
kernels` gives as the sessions recorded them (the benchmark's headline ratios are timed again
side by side, which a report, reading only the database, does not do).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from apps.benchmarks.kernels import mode_summary
from apps.benchmarks.sessions import OperatorResult, geomean, latency_ratio


@dataclass(frozen=True)
class OperatorRow:
    operator: str
    finished: bool
    correct: bool
    start_ms: float | None
    best_ms: float | None
    speedup_vs_naive: float | None
    speedup_vs_reference: float | None
    beats_reference: bool
    rounds_used: int
    rounds_to_best: int | None  # the iteration that made the best kernel
    best_case_id: int | None
    best_strategy_chain: str
    stop_reason: str
    tokens: int
    # The incumbent (best_ms) is the kernel that beat its parent timed beside it; a correct
    # case that read faster in its own evaluation but lost beside its parent is not it.
    fastest_correct_ms: float | None = None
    fastest_correct_case_id: int | None = None

    def as_result(self, mode: str) -> OperatorResult:
        return OperatorResult(
            operator=self.operator, mode=mode, correct=self.correct, start_ms=self.start_ms,
            best_ms=self.best_ms, speedup_vs_naive=self.speedup_vs_naive,
            speedup_vs_reference=self.speedup_vs_reference,
            beats_reference=self.beats_reference, rounds_used=self.rounds_used,
            rounds_to_best=self.rounds_to_best, best_strategy_chain=self.best_strategy_chain,
            stop_reason=self.stop_reason,
        )  # fmt: skip


def strategy_chain(cases: dict[int, dict[str, Any]], case_id: int | None) -> str:
    """The strategies from the best case back to the start ("a <- b"), as the benchmark
    writes them; `cases` maps case id to its row."""
    chain = []
    case = cases.get(case_id) if case_id is not None else None
    while case is not None and case.get("parent_id") is not None:
        chain.append(str(case["strategy"]))
        case = cases.get(case["parent_id"])
    return " <- ".join(chain) or "(the start)"


def operator_rows(
    operators: list[str],
    finished: dict[str, dict[str, Any]],
    cases: list[dict[str, Any]],
    tokens: dict[str, int],
) -> list[OperatorRow]:
    """One row per configured operator: `finished` holds the `operator_finished` payloads by
    operator, `cases` every case row (with "operator", "id", "parent_id", "strategy")."""
    by_id = {c["id"]: c for c in cases}
    rows = []
    for slug in operators:
        p = finished.get(slug)
        rounds = sum(1 for c in cases if c["operator"] == slug)
        if p is None:
            rows.append(OperatorRow(
                operator=slug, finished=False, correct=False, start_ms=None, best_ms=None,
                speedup_vs_naive=None, speedup_vs_reference=None, beats_reference=False,
                rounds_used=rounds, rounds_to_best=None, best_case_id=None,
                best_strategy_chain="",
                stop_reason="did not finish", tokens=tokens.get(slug, 0),
            ))  # fmt: skip
            continue
        best_ref = p.get("speedup_vs_reference")
        fastest = fastest_correct(cases, slug)
        rows.append(OperatorRow(
            operator=slug, finished=True, correct=p.get("best_case_id") is not None,
            start_ms=p.get("start_latency_ms"), best_ms=p.get("best_latency_ms"),
            speedup_vs_naive=p.get("speedup_vs_start"), speedup_vs_reference=best_ref,
            beats_reference=bool(best_ref and best_ref > 1.0),
            rounds_used=p.get("rounds_used", rounds),
            rounds_to_best=by_id.get(p.get("best_case_id"), {}).get("iteration"),
            best_case_id=p.get("best_case_id"),
            best_strategy_chain=strategy_chain(by_id, p.get("best_case_id")),
            stop_reason=str(p.get("reason", "")), tokens=tokens.get(slug, 0),
            fastest_correct_ms=fastest["latency_ms"] if fastest else None,
            fastest_correct_case_id=fastest["id"] if fastest else None,
        ))  # fmt: skip
    return rows


def fastest_correct(cases: list[dict[str, Any]], slug: str) -> dict[str, Any] | None:
    """The operator's correct case with the lowest latency its own evaluation recorded."""
    timed = [c for c in cases if c["operator"] == slug and c.get("correct")
             and c.get("latency_ms") is not None]  # fmt: skip
    return min(timed, key=lambda c: (c["latency_ms"], c["id"]), default=None)


def suite_figures(rows: list[OperatorRow], *, mode: str, tokens_used: int) -> dict[str, Any]:
    """The papers' table for one session: over all its operators, missing ones as failures."""
    figures: dict[str, Any] = {"operators": len(rows), "tokens_used": tokens_used,
                               "finished": sum(r.finished for r in rows)}  # fmt: skip
    if not rows:
        return figures | {"pass_rate": None, "geomean_operators": 0,
                          "geomean_speedup_vs_naive": None, "geomean_speedup_vs_reference": None,
                          "fraction_faster_than_reference": None,
                          "median_self_acceleration": None, "rounds_used": 0,
                          "mean_rounds_to_best": None}  # fmt: skip
    return figures | mode_summary([r.as_result(mode) for r in rows])


def side_by_side(a: list[OperatorRow], b: list[OperatorRow]) -> dict[str, Any]:
    """Two sessions per operator. The ratio is best latency in A / in B (> 1: B is faster),
    over the operators both ran; its geometric mean is the effect of B over A (with A memory
    off and B memory on, the benchmark's memory effect)."""
    in_a, in_b = {r.operator: r for r in a}, {r.operator: r for r in b}
    operators = list(dict.fromkeys([*in_a, *in_b]))
    rows: list[dict[str, Any]] = []
    for slug in operators:
        ra, rb = in_a.get(slug), in_b.get(slug)
        ratio = latency_ratio(ra.as_result("a"), rb.as_result("b")) if ra and rb else None
        rows.append({"operator": slug, "a": asdict(ra) if ra else None,
                     "b": asdict(rb) if rb else None, "ratio_a_over_b": ratio})  # fmt: skip
    ratios = [float(r["ratio_a_over_b"]) for r in rows if r["ratio_a_over_b"] is not None]
    return {"operators": rows, "effect_of_b_over_a": geomean(ratios), "paired": len(ratios)}
