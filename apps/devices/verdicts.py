"""A verdict, told in a few lines for a terminal or a log."""

from __future__ import annotations

from typing import Any


def describe_verdict(verdict: dict[str, Any]) -> str:
    lines = [
        f"verdict: {verdict['status'].upper()}"
        + (f" ({verdict['reason']})" if verdict.get("reason") else "")
    ]
    lines += _compiled(verdict.get("compiled"))
    lines += _correct(verdict.get("correct"))
    lines += _timed(verdict.get("timed"))
    if verdict.get("profiled"):
        p = verdict["profiled"]
        lines.append(
            f"profile: {'profile ' + str(p.get('profile_id')) if p.get('ok') else p.get('reason')}"
        )
        build = (p.get("profile") or {}).get("build")
        if build:
            lines.append(f"profile build: {' '.join(build['flags'])} ({build['differs']})")
    if verdict.get("debugged"):
        d = verdict["debugged"]
        state = (
            "clean"
            if d.get("clean")
            else "; ".join(r["summary"] for r in d.get("reports", [])) or d.get("reason", "")
        )
        lines.append(f"debug (ASan + UBSan on {d.get('case_id', '?')}): {state}")
    for flag in verdict.get("flags", []):
        lines.append(f"flag: {flag}")
    env = verdict["environment"]
    lines.append(f"environment: {env['compiler']}; {env['cpu_model']}; {env['threads']} thread(s); "
                 f"flags {' '.join(env['flags'])}")  # fmt: skip
    if verdict.get("stage_seconds"):
        lines.append(f"seconds by stage: {stage_seconds_text(verdict['stage_seconds'])}")
    return "\n".join(lines)


def stage_seconds_text(stage_seconds: dict[str, float]) -> str:
    """ "compile 0.00, vet 0.05, ...": a verdict's seconds by stage, in the order they ran."""
    return ", ".join(f"{name} {seconds:.2f}" for name, seconds in stage_seconds.items())


def _compiled(compiled: dict[str, Any] | None) -> list[str]:
    if not compiled:
        return []
    if compiled["ok"]:
        return [f"compiled: yes{' (cached)' if compiled.get('cached') else ''}"]
    return ["compiled: no"] + [
        f"  {e['file']}:{e['line']}:{e['column']}: {e['message']}\n    {e['source_line'].strip()}"
        for e in compiled["errors"]
    ]


def _correct(correct: dict[str, Any] | None) -> list[str]:
    if not correct:
        return []
    lines = [f"correct: {'yes' if correct['ok'] else 'no'} ({correct['runs'] - correct['failed']}/"
             f"{correct['runs']} runs pass)"]  # fmt: skip
    for case in correct["cases"]:
        if not case["passed"]:
            errors = (
                f" max_abs={_number(case['max_abs'])} max_rel={_number(case['max_rel'])}"
                if "max_abs" in case
                else ""
            )
            lines.append(
                f"  {case['case_id']} ({case['run_id']}): {case.get('error', 'failed')}{errors}"
            )
    return lines


def _timed(timed: dict[str, Any] | None) -> list[str]:
    if not timed:
        return []
    if "candidate" not in timed:
        return [f"timed: no ({timed.get('reason', '')})"]
    calls = f"{timed['repeats']} calls each, alternated, {timed['threads']} thread(s)"
    if "inputs_renewed" in timed:
        calls += f", {_inputs(timed['inputs_renewed'], timed['repeats'])}"
    lines = [
        f"timed on {timed['case_id']} ({calls}):",
        f"  candidate {_stats(timed['candidate'])}",
        f"  reference {_stats(timed['reference'])}",
        f"  speedup vs PyTorch eager: {timed['speedup']:.2f}x",
    ]
    if "baseline" in timed:
        lines[3:3] = [f"  baseline (the kernel it changed) {_stats(timed['baseline'])}"]
        lines.append(f"  speedup vs the baseline, timed beside it: {timed['vs_baseline']:.2f}x")
    return lines


def _inputs(renewed: int, repeats: int) -> str:
    if renewed == repeats:
        return "new inputs for each"
    return f"new inputs for {renewed} of them" if renewed else "the same inputs for all"


def _number(value: float | str) -> str:
    """A stored error: a float, or "inf"/"nan" (JSON has no number for them)."""
    return f"{value:.3g}" if isinstance(value, int | float) else str(value)


def _stats(stats: dict[str, float]) -> str:
    return (f"median {stats['median_ms']:.3f} ms (mean {stats['mean_ms']:.3f}, "
            f"min {stats['min_ms']:.3f})")  # fmt: skip


def verdict_steps(verdict: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The steps of a verdict as the loop journals them, in the order they ran: `compiled`,
    `case_results` and `timed` (each only when the verdict reached it), each with whether it
    passed and the detail a reader needs (the first errors, the failing cases, the timing)."""
    steps: list[tuple[str, dict[str, Any]]] = []
    compiled = verdict.get("compiled")
    if compiled is not None:
        errors = compiled.get("errors", [])[:5]
        steps.append(("compiled", {"ok": bool(compiled["ok"]), "detail": {
            "cached": compiled.get("cached", False), "errors": errors}}))  # fmt: skip
    correct = verdict.get("correct")
    if correct is not None:
        failing = [c for c in correct.get("cases", []) if not c.get("passed")][:10]
        steps.append(("case_results", {"ok": bool(correct["ok"]), "detail": {
            "runs": correct.get("runs"), "failed": correct.get("failed"),
            "failing": failing}}))  # fmt: skip
    timed = verdict.get("timed")
    if timed is not None:
        detail = {k: timed.get(k) for k in ("case_id", "speedup", "reason", "threads")}
        if "vs_baseline" in timed:
            detail["vs_baseline"] = timed["vs_baseline"]
        if "candidate" in timed:
            detail["median_ms"] = timed["candidate"]["median_ms"]
            detail["reference_median_ms"] = timed["reference"]["median_ms"]
        steps.append(("timed", {"ok": bool(timed.get("ok")), "detail": detail}))
    return steps
