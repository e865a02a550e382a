"""One line per journal event, for the session page and its live log."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Payload = dict[str, Any]


def _ms(value: Any) -> str:
    return f"{value:.3f} ms" if isinstance(value, int | float) else "not timed"


def _times(value: Any) -> str:
    return f"{value:.2f}x" if isinstance(value, int | float) else "-"


def _tiers(p: Payload) -> str:
    tiers = ", ".join(f"{tier} {n}" for tier, n in p.get("tokens_per_tier", {}).items())
    return (f"{p['tokens']}/{p['budget']} tokens ({tiers}); {len(p.get('retrieved', []))} "
            f"retrieved, {len(p.get('hot_rules', []))} rules")  # fmt: skip


def _proposed(p: Payload) -> str:
    adopted = ", ".join(a["key"] for a in p.get("adopted", []))
    return (f"{p['operator']} #{p['iteration']}: {p['strategy']}"
            + (f"; adopted {adopted}" if adopted else ""))  # fmt: skip


def _correct(p: Payload) -> str:
    detail = p.get("detail", {})
    runs, failed = detail.get("runs") or 0, detail.get("failed") or 0
    return f"correct: {'yes' if p['ok'] else 'no'} ({runs - failed}/{runs} runs pass)"


def _timed(p: Payload) -> str:
    detail = p.get("detail", {})
    if not p["ok"]:
        return f"not timed: {detail.get('reason') or 'refused'}"
    beside = detail.get("vs_baseline")
    parent = f", {_times(beside)} vs its parent timed beside it" if beside is not None else ""
    return (
        f"{_ms(detail.get('median_ms'))}{parent}, {_times(detail.get('speedup'))} vs PyTorch eager"
    )


def _recorded(p: Payload) -> str:
    vs_parent = p.get("speedup_vs_parent")
    parent = f", {_times(vs_parent)} vs its parent" if vs_parent is not None else ""
    return f"iteration {p['iteration']}: {p['outcome']}, {_ms(p.get('latency_ms'))}{parent}"


def _finished(p: Payload) -> str:
    return (f"{p['operator']} finished: {p['reason']}; best {_ms(p['best_latency_ms'])}, "
            f"{_times(p['speedup_vs_start'])} over the start")  # fmt: skip


def _replaced(p: Payload) -> str:
    """Said with the comparison that decided: a candidate replaces its parent when it ran faster
    timed beside it, in one process. Its latency and the incumbent's come from evaluations
    minutes apart, so they can read the other way ("7.869 ms, was 5.465 ms")."""
    head = f"{p['operator']}: new incumbent, case {p['case_id']}"
    if not p.get("previous_case_id"):
        return f"{head}, the first correct kernel, at {_ms(p['latency_ms'])}"
    return (
        f"{head}: faster than its parent timed beside it ({_ms(p['latency_ms'])} here; the "
        f"incumbent read {_ms(p['previous_latency_ms'])} in its own, earlier evaluation)"
    )


def _control(p: Payload) -> str:
    by = f" by {p['actor']}" if p.get("actor") else ""
    return f"{p['status']}{by}" + (f": {p['reason']}" if p.get("reason") else "")


# What an operator starts from, as `operator_started` names it.
STARTS = {"uploaded": "the kernel uploaded for this session",
          "starting kernel": "its starting kernel"}  # fmt: skip


def starting_from(start: str) -> str:
    return STARTS.get(start, start)


SUMMARIES: dict[str, Callable[[Payload], str]] = {
    "session_started": lambda p: (
        f"{p['policy']} policy, memory {p['memory_mode']}, "
        f"{len(p['operators'])} operator(s) on {p['target']}"
    ),
    "operator_started": lambda p: f"{p['operator']} started, from {starting_from(p['start'])}",
    "iteration_started": lambda p: (
        f"{p['operator']} iteration {p['iteration']} ({p['stage']}, {p['rounds_left']} rounds left)"
    ),
    "context_assembled": _tiers,
    "candidate_proposed": _proposed,
    "model_called": lambda p: f"{p['model']}: {sum(p['usage'].values())} tokens",
    "tool_called": lambda p: f"{p['tool']}: {p['summary'][:200]}",
    "compiled": lambda p: "compiled" if p["ok"] else "did not compile",
    "case_results": _correct,
    "timed": _timed,
    "case_recorded": _recorded,
    "incumbent_replaced": _replaced,
    "adoption_recorded": lambda p: f"adopted {len(p['adopted'])} of {len(p['retrieved'])} items",
    "stage_scored": lambda p: f"{p['operator']} {p['stage']} stage scored {p['score']:.3f}",
    "value_updated": lambda p: f"{len(p['items'])} value score(s) updated ({p['stage']})",
    "rule_proposed": lambda p: f"rule {p['rule_id']} proposed: {p['statement'][:200]}",
    "operator_finished": _finished,
    "session_note": lambda p: p["text"][:300],
}


def event_summary(kind: str, payload: Payload) -> str:
    """A readable line; plain text (the page escapes it, the socket client sets textContent)."""
    summarize = SUMMARIES.get(kind, _control if kind.startswith("session_") else None)
    if summarize is None:
        return json.dumps(payload)[:300]
    try:
        return summarize(payload)
    except (KeyError, TypeError, ValueError):
        return json.dumps(payload)[:300]
