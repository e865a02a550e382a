"""A verdict judged into a case's outcome: correct or not, and whether it is faster than its
parent (timed side by side where it could be). The loop records what this says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apps.agents.policy import FAILED_OUTCOMES, Candidate
from apps.devices.models import Evaluation
from apps.devices.verdicts import describe_verdict
from apps.memory.models import Case
from apps.runs.candidates import candidate_of_case

IMPROVEMENT_MARGIN = 0.02  # faster by more than timing noise (~3% spread at the median)


@dataclass(frozen=True)
class Judged:
    outcome: str
    correct: bool
    latency_ms: float | None = None
    speedup_vs_reference: float | None = None
    speedup_vs_parent: float | None = None
    validation: dict[str, Any] | None = None
    feedback: dict[str, Any] | None = None


SAME_BINARY_NOTE = ("gcc compiled this candidate to the very shared object its parent ran, "
                    "with the same threads: the change does nothing to the kernel, and any "
                    "difference in time is noise")  # fmt: skip


def ran_as_parent(evaluation: Evaluation, candidate: Candidate, parent: Case | None) -> bool:
    """Whether the candidate ran the very binary its correct, timed parent ran, with the same
    threads (a verdict from before the hash was recorded matches nothing)."""
    if parent is None or not parent.correct or parent.latency_ms is None:
        return False
    ran = binary_hash(evaluation)
    parent_evaluation = Evaluation.objects.filter(pk=parent.feedback.get("evaluation_id")).first()
    return (ran is not None and parent_evaluation is not None
            and ran == binary_hash(parent_evaluation)
            and candidate.threads == candidate_of_case(parent).threads)  # fmt: skip


def binary_hash(evaluation: Evaluation) -> str | None:
    compiled = (evaluation.verdict or {}).get("compiled") or {}
    return compiled.get("sha256") if compiled.get("ok") else None


def speedup_over_parent(timed: dict[str, Any], latency_ms: float,
                        parent_latency_ms: float | None) -> float | None:  # fmt: skip
    """Side by side when the evaluation timed the parent as its baseline; otherwise against the
    parent's own timing, taken earlier."""
    if "vs_baseline" in timed:
        return float(timed["vs_baseline"])
    return parent_latency_ms / latency_ms if parent_latency_ms else None


def judge(evaluation: Evaluation, parent_latency_ms: float | None,
          same_binary: bool = False) -> Judged:  # fmt: skip
    if evaluation.status != Evaluation.Status.DONE or not evaluation.verdict:
        reason = evaluation.error or "the evaluation did not finish"
        return Judged(
            "crashed",
            False,
            validation={},
            feedback={"summary": f"evaluation failed: {reason}", "reason": reason},
        )
    verdict = evaluation.verdict
    summary = describe_verdict(verdict)[:3000]
    feedback = {"summary": summary, "reason": verdict.get("reason", ""),
                "flags": verdict.get("flags", []), "evaluation_id": evaluation.pk}  # fmt: skip
    validation = {"cases": (verdict.get("correct") or {}).get("cases", [])[:50]}
    status = verdict["status"]
    if status != "correct":
        outcome = status if status in FAILED_OUTCOMES else "crashed"
        return Judged(outcome, False, validation=validation, feedback=feedback)
    timed = verdict.get("timed") or {}
    if not timed.get("ok") or "candidate" not in timed:
        wrong = "wrong output" in " ".join(verdict.get("flags", []))
        return Judged(
            "incorrect" if wrong else "crashed",
            False,
            validation=validation,
            feedback={**feedback, "reason": timed.get("reason", "not timed")},
        )
    latency = float(timed["candidate"]["median_ms"])
    if same_binary:
        feedback = {**feedback, "same_binary": True,
                    "summary": f"{SAME_BINARY_NOTE}\n{summary}"[:3000]}  # fmt: skip
        return Judged("no_change", True, latency, float(timed["speedup"]), 1.0, validation,
                      feedback)  # fmt: skip
    vs_parent = speedup_over_parent(timed, latency, parent_latency_ms)
    outcome = "no_change"
    if vs_parent is not None and vs_parent > 1 / (1 - IMPROVEMENT_MARGIN):
        outcome = "improved"
    elif vs_parent is not None and vs_parent < 1 - IMPROVEMENT_MARGIN:
        outcome = "regressed"
    return Judged(outcome, True, latency, float(timed["speedup"]), vs_parent, validation, feedback)
