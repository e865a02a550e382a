"""The journal a seeded session writes is the one the loop wrote before it was restructured
(issue 50): kinds, order and payloads, for two sessions of one team, the second reading what
the first learned. Only what a rerun cannot repeat is pinned or left out: the timings (each
kernel's latency is a fixed function of the kernel as it ran), the ids the database hands out
(numbered in order of appearance), the compile cache's hit flag, the size of each case's error
(the evaluator draws inputs afresh) and a case's feedback text (the verdict's own words).

After a deliberate change to what the loop journals, write the expectation again with
KOPE_WRITE_GOLDEN=1 and read its diff before committing it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from apps.agents.policy import Candidate
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation
from apps.memory.models import JournalEvent
from apps.operators.models import OperatorVersion
from apps.runs.config import Budgets, Measurement
from apps.runs.evaluators import evaluate_here
from apps.runs.loop import advance
from apps.runs.models import OptimizationSession
from apps.runs.policies import policy_for
from apps.runs.services import session_create
from tests.factories import TeamFactory, stored_builtin

GOLDEN = Path(__file__).parent / "golden" / "seeded_journal.json"
REFERENCE_MS = 1.0
ID_FIELDS = {"case_id", "parent_case_id", "previous_case_id", "best_case_id", "evaluation_id",
             "rule_id", "version_id"}  # fmt: skip
TIMING_FLAGS = ("implausible speedup", "time does not grow", "timing refused")
KEYED_ID = re.compile(r"\b(case|rule):(\d+)\b")  # a key, alone or in a rationale


def pinned_ms(sha256: str, flags: Any, threads: int) -> float:
    """A latency between 0.5 and 1.5 ms that depends only on the kernel as it ran."""
    digest = hashlib.sha256(f"{sha256}|{list(flags)}|{threads}".encode()).hexdigest()
    return 0.5 + int(digest[:8], 16) % 1000 / 1000


def evaluate_pinned(version: OperatorVersion, candidate: Candidate, options: EvalSettings,
                    session: OptimizationSession) -> Evaluation:  # fmt: skip
    """The real evaluation (compile, vet, correctness) with what a rerun cannot repeat pinned:
    the timings, the flags drawn from them, the seconds by stage, the compile cache's hit and the
    size of each case's error (its inputs are drawn afresh)."""
    evaluation = evaluate_here(version, candidate, options, session)
    verdict = evaluation.verdict or {}
    verdict.pop("stage_seconds", None)
    verdict["flags"] = [f for f in verdict.get("flags", []) if not f.startswith(TIMING_FLAGS)]
    if verdict.get("compiled"):
        verdict["compiled"]["cached"] = False
    for case in (verdict.get("correct") or {}).get("cases", []):
        pin_errors(case)
    timed = verdict.get("timed") or {}
    if "candidate" in timed:
        sha, flags, threads = candidate.kernel_key
        candidate_ms = pinned_ms(sha, flags, threads)
        timed["candidate"] = pinned_stats(candidate_ms)
        timed["reference"] = pinned_stats(REFERENCE_MS)
        timed["speedup"] = REFERENCE_MS / candidate_ms
        if "baseline" in timed:
            baseline_ms = pinned_ms(options.baseline_sha256, options.baseline_flags, threads)
            timed["baseline"] = pinned_stats(baseline_ms)
            timed["vs_baseline"] = baseline_ms / candidate_ms
    evaluation.save(update_fields=["verdict"])
    return evaluation


def pin_errors(case: dict[str, Any]) -> None:
    """The errors of a case run on inputs the evaluator drew afresh: 0 where it passed, 1 where
    it did not (a NaN or inf, which no draw changes, stays)."""
    for key in ("max_abs", "max_rel"):
        if isinstance(case.get(key), float | int):
            case[key] = 0.0 if case["passed"] else 1.0


def pinned_stats(median_ms: float) -> dict[str, float]:
    return {"median_ms": median_ms, "mean_ms": median_ms, "min_ms": median_ms}


def run_session(team: Any, operators: list[str]) -> OptimizationSession:
    session = session_create(team=team, user=None, operators=operators, memory_mode="read_write",
                             seed=7, budgets=Budgets(rounds=3),
                             measurement=Measurement(seeds=1, warmup=1, repeats=3),
                             start=False)  # fmt: skip
    for _ in range(100):
        if not advance(session.pk, evaluate=evaluate_pinned, policy_for=policy_for):
            break
    session.refresh_from_db()
    assert session.status == "finished", session.status_reason
    return session


class Numbering:
    """Database ids as their order of first appearance, per kind of id."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[int, int]] = {}

    def __call__(self, kind: str, value: int) -> str:
        ids = self.seen.setdefault(kind, {})
        return f"{kind}#{ids.setdefault(value, len(ids) + 1)}"


def normalized(value: Any, numbering: Numbering, field: str = "") -> Any:
    if isinstance(value, dict):
        return {k: normalized(v, numbering, k) for k, v in value.items()
                if k not in ("cached", "feedback")}  # fmt: skip
    if isinstance(value, list):
        return [normalized(v, numbering, field) for v in value]
    if field in ID_FIELDS and isinstance(value, int):
        return numbering(field.removesuffix("_id").removeprefix("parent_")
                         .removeprefix("previous_").removeprefix("best_"), value)  # fmt: skip
    if isinstance(value, str):
        return KEYED_ID.sub(lambda match: numbering(match[1], int(match[2])), value)
    if isinstance(value, float):
        return round(value, 6)
    return value


def in_key_order(event: list[Any]) -> list[Any]:
    """A `value_updated` event lists its items sorted by key as text ("case:100" before
    "case:99"), which the ids a rerun gets reorder: compare them in the order of their numbers."""
    kind, step, payload = event
    if kind == "value_updated":
        payload = {**payload, "items": sorted(payload["items"], key=numbered_key)}
    return [kind, step, payload]


def numbered_key(item: dict[str, Any]) -> tuple[str, int]:
    kind, number = item["key"].split("#")
    return kind, int(number)


def journal_of(sessions: list[OptimizationSession]) -> list[list[Any]]:
    numbering = Numbering()
    return [
        [event.kind, event.step.split(":", 1)[-1] if event.step else "",
         normalized(event.payload, numbering)]
        for session in sessions
        for event in JournalEvent.objects.filter(session_id=session.pk).order_by("seq")
    ]  # fmt: skip


def test_a_seeded_session_writes_the_journal_it_wrote_before(
    transactional_db: None, eager_tasks: None
) -> None:
    team = TeamFactory()
    for slug in ("gemm", "batched_matmul", "matmul_bias_relu"):
        stored_builtin(slug, team)
    first = run_session(team, ["gemm", "batched_matmul"])
    second = run_session(team, ["matmul_bias_relu"])  # recalls what the first one recorded
    assert any(e[2]["retrieved"] for e in journal_of([second]) if e[0] == "context_assembled")

    journal = journal_of([first, second])

    if os.environ.get("KOPE_WRITE_GOLDEN"):
        GOLDEN.write_text(json.dumps(journal, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {GOLDEN.name}")
    expected = [in_key_order(event) for event in json.loads(GOLDEN.read_text())]
    journal = [in_key_order(event) for event in journal]
    assert len(journal) == len(expected)
    for seq, (got, want) in enumerate(zip(journal, expected, strict=True), start=1):
        assert got == want, f"event {seq} differs:\n{json.dumps(got)}\n{json.dumps(want)}"
