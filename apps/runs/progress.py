"""Where a session and each of its operators stand, read from the journal and the cases every
time (never kept in memory, so any worker can take the next iteration), and what follows from
it: whether the operator stops, what a candidate modifies, what it starts from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apps.agents.assembly import Tried
from apps.agents.policy import Attempt, Candidate, KernelKey, OperatorBrief
from apps.devices.models import KernelSource
from apps.memory.journal import step_done
from apps.memory.models import Case, JournalEvent
from apps.operators.models import OperatorVersion
from apps.operators.spec import spec_from_json
from apps.runs.candidates import candidate_of_case
from apps.runs.config import Budgets, OperatorEntry, SessionConfig
from apps.runs.models import OptimizationSession


def step_key(position: int, iteration: int, kind: str) -> str:
    """The idempotency key of one step of an iteration: a replay finds its event under it."""
    return f"{position}:{iteration}:{kind}"


@dataclass
class Progress:
    """Where one operator stands, read from the session's cases and journal."""

    cases: list[Case]
    incumbent: Case | None
    correctness_scored: bool
    tokens_used: int

    @property
    def iteration(self) -> int:
        return len(self.cases)

    @property
    def first_correct(self) -> Case | None:
        return next((c for c in self.cases if c.correct), None)

    @property
    def parent(self) -> Case | None:
        """What a candidate modifies: the incumbent, or while repairing, the latest attempt."""
        if self.incumbent is not None:
            return self.incumbent
        return self.cases[-1] if self.cases else None


def operator_version(entry: OperatorEntry) -> OperatorVersion:
    return OperatorVersion.objects.select_related("operator").get(pk=entry.version_id)


def load_progress(session: OptimizationSession, version: OperatorVersion, slug: str) -> Progress:
    cases = list(
        Case.objects.filter(session_id=session.pk, version=version)
        .select_related("source", "version__operator")
        .order_by("iteration")
    )
    events = JournalEvent.objects.filter(session_id=session.pk, payload__operator=slug)
    replaced = events.filter(kind="incumbent_replaced").order_by("-seq").first()
    incumbent = next((c for c in cases if replaced and c.pk == replaced.payload["case_id"]), None)
    tokens = sum(
        sum(e.payload["usage"].values()) for e in events.filter(kind="model_called").only("payload")
    )
    scored = events.filter(kind="stage_scored", payload__stage="correctness").exists()
    return Progress(cases, incumbent, scored, tokens)


def current_operator(session: OptimizationSession, config: SessionConfig) -> OperatorEntry | None:
    """The first of the session's operators that has not finished."""
    finished = set(
        JournalEvent.objects.filter(session_id=session.pk, kind="operator_finished").values_list(
            "payload__operator", flat=True
        )
    )
    return next((e for e in config.operators if e.slug not in finished), None)


def operator_started(
    session: OptimizationSession, config: SessionConfig, entry: OperatorEntry
) -> bool:
    position = [e.slug for e in config.operators].index(entry.slug)
    return step_done(session.pk, f"{position}:start") is not None


def stop_reason(progress: Progress, budgets: Budgets, *, stopping: bool) -> str:
    """Why the operator stops before its next iteration ("" when it goes on): a person's stop,
    its round or token budget, or a plateau of rounds without a new incumbent."""
    n = progress.iteration
    if stopping:
        return "stopped by request"
    if n >= budgets.rounds:
        return f"round budget spent ({budgets.rounds} rounds)"
    if progress.tokens_used >= budgets.tokens:
        return f"token budget spent ({progress.tokens_used} of {budgets.tokens} tokens)"
    incumbent = progress.incumbent
    if incumbent is not None and n - incumbent.iteration - 1 >= budgets.plateau:
        return f"plateau: no faster correct kernel in the last {budgets.plateau} rounds"
    return ""


def starting_candidate(entry: OperatorEntry, version: OperatorVersion,
                       target: str) -> Candidate | None:  # fmt: skip
    """The kernel iteration 0 evaluates: the one uploaded with the session, else the
    operator's starting kernel for the target; None when there is neither."""
    if entry.start_source_sha256:
        source = KernelSource.objects.get(sha256=entry.start_source_sha256)
        return Candidate(source.text, "uploaded starting kernel")
    start = version.starting_kernels.filter(target=target).first()
    return Candidate(start.source, "starting kernel") if start else None


def operator_summary(slug: str, reason: str, progress: Progress) -> dict[str, Any]:
    """The `operator_finished` payload: why it stopped, its best kernel and the speedups."""
    start = progress.cases[0] if progress.cases else None
    best = progress.incumbent
    start_ms = start.latency_ms if start else None
    best_ms = best.latency_ms if best else None
    return {
        "operator": slug, "reason": reason, "rounds_used": progress.iteration,
        "best_case_id": best.pk if best else None, "start_latency_ms": start_ms,
        "best_latency_ms": best_ms,
        "speedup_vs_start": start_ms / best_ms if start_ms and best_ms else None,
        "speedup_vs_reference": best.speedup_vs_reference if best else None,
    }  # fmt: skip


# --- what the situation is assembled from (plain values: apps/agents/assembly.py) ---------------


def brief_of(version: OperatorVersion) -> OperatorBrief:
    spec = spec_from_json(version.spec)
    return OperatorBrief(
        slug=version.operator.slug,
        name=version.name,
        family=version.operator.family,
        description=version.description,
        version_id=version.pk,
        max_abs=spec.max_abs,
        max_rel=spec.max_rel,
    )


def attempt_of(case: Case) -> Attempt:
    summary = case.feedback.get("summary", "")
    return Attempt(case.pk, candidate_of_case(case), case.outcome, case.correct,
                   case.latency_ms, summary)  # fmt: skip


def tried_of(case: Case) -> Tried:
    return Tried(case.pk, case.parent_id, case.source_id, case.outcome, case.strategy)


def kernels_evaluated(session_id: int, operator: str, iteration: int) -> frozenset[KernelKey]:
    """The kernels proposed for this operator before this iteration, as they ran."""
    proposed = JournalEvent.objects.filter(
        session_id=session_id, kind="candidate_proposed", payload__operator=operator,
        payload__iteration__lt=iteration,
    ).values_list("payload", flat=True)  # fmt: skip
    return frozenset((p["source_sha256"], tuple(p["flags"]), p["threads"]) for p in proposed)
