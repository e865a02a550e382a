"""What a cachegrind profile shows on a page: the costliest kernel lines and functions, with
their cache misses and share of the kernel's instructions, and the timed calls laid end to
end as the Chrome trace has them. Counts are shown whole, with thousands marked."""

from __future__ import annotations

from typing import Any

from apps.memory.compare import measure_text

TOP_LINES = 15


def line_costs_side_by_side(a: dict[str, Any] | None, b: dict[str, Any] | None,
                            limit: int = TOP_LINES) -> dict[str, Any]:  # fmt: skip
    """The costliest kernel lines of each profile (by instructions), for two columns."""
    return {"a": top_lines(a, limit), "b": top_lines(b, limit)}


def top_lines(profile: dict[str, Any] | None, limit: int = TOP_LINES) -> list[dict[str, Any]]:
    if not profile:
        return []
    lines = profile.get("lines", [])
    total = sum(line.get("Ir", 0) for line in lines) or 1
    ranked = sorted(lines, key=lambda line: line.get("Ir", 0), reverse=True)[:limit]
    return [{"line": line["line"], "source": line.get("source", ""), **costs(line, total)}
            for line in ranked]  # fmt: skip


def function_costs(profile: dict[str, Any]) -> list[dict[str, Any]]:
    """Each kernel function's costs, costliest first, then "other": everything outside the
    kernel (the driver, libc, the loader), whose share is of the whole program's."""
    rows = profile.get("functions", [])
    total = sum(row.get("Ir", 0) for row in rows) or 1
    return [{"function": row["function"], "in_kernel": row.get("file") is not None,
             "aggregated": row.get("aggregated_functions"), **costs(row, total)}
            for row in rows]  # fmt: skip


def costs(row: dict[str, Any], total: int) -> dict[str, Any]:
    ir = row.get("Ir", 0)
    d1 = row.get("D1mr", 0) + row.get("D1mw", 0)
    ll = row.get("DLmr", 0) + row.get("DLmw", 0)
    return {"ir": ir, "share": ir / total, "d1_misses": d1, "ll_misses": ll,
            "ir_text": measure_text(ir), "d1_text": measure_text(d1),
            "ll_text": measure_text(ll)}  # fmt: skip


def call_samples_ms(trace: dict[str, Any]) -> list[float]:
    """The timed calls' durations, in order, from the trace's complete ("X") events."""
    calls = [event for event in trace.get("traceEvents", []) if event.get("ph") == "X"]
    return [float(ms) for call in calls
            if isinstance(ms := (call.get("args") or {}).get("ms"), int | float)]  # fmt: skip
