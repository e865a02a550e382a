"""The experience forest as a policy reads it: each case a plain frozen value (`CaseView`), and
the kernel a case evaluated as it was proposed (`ProposedKernel`). The queries live here, so
the policies (apps/agents) read memory through the loop's tools without touching the ORM; the
loop's tools (apps/runs/tools.py) wrap a ProposedKernel into the policy's Candidate, which
memory, below the agents, cannot import.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet

from apps.devices.models import KernelSource
from apps.memory.models import Case, JournalEvent


@dataclass(frozen=True)
class CaseView:
    """One case of the forest, with what the offline policy reads of it."""

    id: int
    session_id: int
    version_id: int
    operator: str  # the operator's slug
    family: str
    target: str
    iteration: int
    parent_id: int | None
    strategy: str
    source: str | None  # the kernel's text; None when the case recorded none
    parent_source: str | None  # its parent's kernel; None without a parent or its source
    outcome: str
    correct: bool
    latency_ms: float | None
    speedup_vs_parent: float | None
    same_binary: bool = False  # it compiled to its parent's very binary


@dataclass(frozen=True)
class ProposedKernel:
    """The kernel a case evaluated, as it was proposed: source, strategy, flags, threads."""

    source: str
    strategy: str
    flags: tuple[str, ...] = ()
    threads: int = 1


def case_view(case_id: int) -> CaseView | None:
    case = with_sources(Case.objects.filter(pk=case_id)).first()
    return view_of(case) if case is not None else None


def tree_views(case: CaseView) -> list[CaseView]:
    """The cases of `case`'s operator in its session, on its target, in iteration order."""
    tree = Case.objects.filter(session_id=case.session_id, version_id=case.version_id,
                               target=case.target)  # fmt: skip
    return [view_of(c) for c in with_sources(tree)]


def child_views(case: CaseView) -> list[CaseView]:
    """The cases made from `case` in its session, in iteration order."""
    children = Case.objects.filter(parent_id=case.id, session_id=case.session_id)
    return [view_of(c) for c in with_sources(children).order_by("iteration")]


def with_sources(cases: QuerySet[Case]) -> QuerySet[Case]:
    return cases.select_related("version__operator", "source", "parent__source")


def view_of(case: Case) -> CaseView:
    operator = case.version.operator
    parent = case.parent
    return CaseView(
        id=case.pk, session_id=case.session_id, version_id=case.version_id,
        operator=operator.slug, family=operator.family, target=case.target,
        iteration=case.iteration, parent_id=case.parent_id, strategy=case.strategy,
        source=case.source.text if case.source is not None else None,
        parent_source=parent.source.text if parent is not None and parent.source else None,
        outcome=case.outcome, correct=case.correct, latency_ms=case.latency_ms,
        speedup_vs_parent=case.speedup_vs_parent,
        same_binary=bool(case.feedback.get("same_binary")),
    )  # fmt: skip


def proposed_in(event: JournalEvent) -> ProposedKernel:
    """The kernel a `candidate_proposed` event proposed."""
    payload = event.payload
    source = KernelSource.objects.get(sha256=payload["source_sha256"])
    return ProposedKernel(source.text, payload["strategy"], tuple(payload["flags"]),
                          payload["threads"])  # fmt: skip


def proposed_kernel(case: Case) -> ProposedKernel:
    """The kernel a case evaluated, as it was proposed (flags and threads included)."""
    if case.source is None:
        return ProposedKernel("", case.strategy)
    event = proposal_event(case)
    if event is not None:
        return proposed_in(event)
    return ProposedKernel(case.source.text, case.strategy)


def proposal_event(case: Case) -> JournalEvent | None:
    """The `candidate_proposed` event of a case with a source."""
    assert case.source is not None
    return JournalEvent.objects.filter(
        session_id=case.session_id, kind="candidate_proposed",
        payload__operator=case.version.operator.slug, payload__iteration=case.iteration,
        payload__source_sha256=case.source.sha256,
    ).first()  # fmt: skip


def proposed_kernel_of(case: CaseView) -> ProposedKernel:
    return proposed_kernel(Case.objects.select_related("version__operator", "source")
                           .get(pk=case.id))  # fmt: skip
