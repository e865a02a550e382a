"""Cases over HTTP: list and get, a forest subtree, two cases compared (the page's data), and
the knowledge base searched.

No `from __future__ import annotations` here: ninja reads the parameter annotations of
@paginate-wrapped views at run time, where string annotations cannot be resolved.
"""

import functools
import json
from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest, HttpResponse
from ninja import Field, Router, Schema
from ninja.pagination import paginate

from apps.accounts.models import Team
from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.core.errors import Conflict, DomainError, NotFound
from apps.core.pagination import LimitOffset
from apps.memory import selectors
from apps.memory.compare import measurement_rows, unified_diff_text
from apps.memory.compare_views import side_of
from apps.memory.forest import load_forest
from apps.memory.knowledge import Filters, Result, knowledge_search
from apps.memory.models import Case
from apps.memory.remeasure import Measurement, measure_again, measurements_again

router = Router(tags=["cases"])

Outcome = Literal["improved", "regressed", "no_change", "compile_error", "incorrect", "crashed",
                  "timed_out", "rejected"]  # fmt: skip
Kind = Literal["case", "rule", "document"]
RuleStatus = Literal["candidate", "pending", "approved", "vetoed", "retired"]
MAX_SUBTREE_DEPTH = 20


class CaseOut(Schema):
    id: int
    session: int
    iteration: int
    operator: str
    operator_version: int
    target: str
    parent: int | None
    strategy: str
    tags: list[Any]
    outcome: str
    correct: bool
    latency_ms: float | None
    speedup_vs_reference: float | None
    speedup_vs_parent: float | None
    validation: dict[str, Any]
    feedback: dict[str, Any]
    retrieved: list[Any]
    adopted: list[Any]
    code: str
    created_at: datetime


class NodeOut(Schema):
    id: int
    parent: int | None
    iteration: int
    session: int
    outcome: str
    correct: bool
    speedup: float | None
    latency_ms: float | None
    strategy: str
    child_count: int
    children: list["NodeOut"]


class MeasurementOut(Schema):
    label: str
    a: float | None
    b: float | None
    change: float | None = Field(None, description="(b - a) / |a|")
    verdict: str = Field(..., description="better, worse, same, or empty when not comparable")


class SideOut(Schema):
    case: int
    samples_ms: list[float]
    reference_median_ms: float | None
    profile: int | None = Field(None, description="id of its latest profile (trace download)")
    profiling: bool


class CompareOut(Schema):
    a: SideOut
    b: SideOut
    same_code: bool
    diff: str = Field(..., description="unified diff of A's code to B's")
    measurements: list[MeasurementOut]


def case_out(case: Case) -> dict[str, Any]:
    return {
        "id": case.pk, "session": case.session_id, "iteration": case.iteration,
        "operator": case.version.operator.slug, "operator_version": case.version.number,
        "target": case.target, "parent": case.parent_id, "strategy": case.strategy,
        "tags": case.tags, "outcome": case.outcome, "correct": case.correct,
        "latency_ms": case.latency_ms, "speedup_vs_reference": case.speedup_vs_reference,
        "speedup_vs_parent": case.speedup_vs_parent, "validation": case.validation,
        "feedback": case.feedback, "retrieved": case.retrieved, "adopted": case.adopted,
        "code": case.source.text if case.source else "", "created_at": case.created_at,
    }  # fmt: skip


def viewable_team(request: HttpRequest, slug: str) -> Team:
    return membership_for(request.user, slug, Permission.VIEW).team


def team_case(team: Team, case_id: int) -> Case:
    case = selectors.team_case(team, case_id)
    if case is None:
        raise NotFound(f"No case {case_id}.")
    return case


@router.get("/teams/{slug}/cases", response=list[CaseOut])
@paginate(LimitOffset)
def list_cases(request: HttpRequest, slug: str, session: int | None = None,
               operator: str | None = None, outcome: Outcome | None = None) -> Any:  # fmt: skip
    cases = Case.objects.filter(session__team=viewable_team(request, slug))
    if session is not None:
        cases = cases.filter(session_id=session)
    if operator:
        cases = cases.filter(version__operator__slug=operator)
    if outcome:
        cases = cases.filter(outcome=outcome)
    cases = cases.select_related("source", "version__operator").order_by("pk")
    return LazyCases(cases)


class LazyCases:
    """A case queryset that the paginator slices in the database, serialized page by page."""

    def __init__(self, cases: Any) -> None:
        self.cases = cases

    @functools.cached_property
    def total(self) -> int:
        return int(self.cases.count())

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, page: slice) -> list[dict[str, Any]]:
        # An offset past the end is an empty page (and never a LIMIT PostgreSQL cannot hold).
        total = self.total
        start, stop = min(page.start or 0, total), min(page.stop or total, total)
        return [case_out(case) for case in self.cases[start:stop]]


@router.get("/teams/{slug}/cases/{case_id}", response=CaseOut)
def get_case(request: HttpRequest, slug: str, case_id: int) -> Any:
    return case_out(team_case(viewable_team(request, slug), case_id))


@router.get("/teams/{slug}/cases/{case_id}/subtree", response=NodeOut)
def case_subtree(request: HttpRequest, slug: str, case_id: int,
                 depth: int = 3) -> Any:  # fmt: skip
    """The case and its descendants down to `depth` levels (a node's `child_count` says how
    many children it has where `children` stops)."""
    if not 0 <= depth <= MAX_SUBTREE_DEPTH:
        raise DomainError(f"depth must be between 0 and {MAX_SUBTREE_DEPTH}, not {depth}")
    team = viewable_team(request, slug)
    case = team_case(team, case_id)
    nodes = load_forest(case.version.operator, case.target, team.pk)
    return nodes[case.pk].as_json(depth)


@router.get("/teams/{slug}/compare", response=CompareOut)
def compare_cases(request: HttpRequest, slug: str, a: int, b: int,
                  ignore_whitespace: bool = False) -> Any:  # fmt: skip
    team = viewable_team(request, slug)
    left, right = side_of(team, team_case(team, a)), side_of(team, team_case(team, b))
    return {
        "a": side_out(left), "b": side_out(right), "same_code": left.source == right.source,
        "diff": unified_diff_text(left.source, right.source, old_name="a/kernel.c",
                                  new_name="b/kernel.c", ignore_whitespace=ignore_whitespace),
        "measurements": measurement_rows(left.measures(), right.measures()),
    }  # fmt: skip


def side_out(side: Any) -> dict[str, Any]:
    return {"case": side.case.pk, "samples_ms": side.samples_ms,
            "reference_median_ms": side.reference_median_ms,
            "profile": side.profile.pk if side.profile else None,
            "profiling": side.profiling is not None}  # fmt: skip


@router.get("/teams/{slug}/profiles/{profile_id}/trace", response={200: dict[str, Any]})
def profile_trace(request: HttpRequest, slug: str, profile_id: int) -> Any:
    """A profile as Chrome Trace Event JSON (opens in Perfetto and chrome://tracing)."""
    team = viewable_team(request, slug)
    profile = selectors.team_profile(team, profile_id)
    if profile is None:
        raise NotFound(f"No profile {profile_id}.")
    return HttpResponse(json.dumps(profile.trace), content_type="application/json")


class MeasurementAgainOut(Schema):
    evaluation: int
    number: int = Field(..., description="1 for the first measurement again, and so on")
    status: str = Field(..., description="queued, running, done or failed")
    median_ms: float | None
    speedup_vs_reference: float | None
    vs_parent: float | None = Field(None, description="timed beside its parent kernel")
    error: str
    created_at: datetime


def measurement_out(measurement: Measurement) -> dict[str, Any]:
    evaluation = measurement.evaluation
    return {"evaluation": evaluation.pk, "number": measurement.number,
            "status": evaluation.status, "median_ms": measurement.median_ms,
            "speedup_vs_reference": measurement.speedup_vs_reference,
            "vs_parent": measurement.vs_parent, "error": evaluation.error,
            "created_at": evaluation.created_at}  # fmt: skip


@router.get("/teams/{slug}/cases/{case_id}/measurements", response=list[MeasurementAgainOut])
def case_measurements(request: HttpRequest, slug: str, case_id: int) -> Any:
    """The case's kernel measured again under its verdict's settings, latest first."""
    team = viewable_team(request, slug)
    return [measurement_out(m) for m in measurements_again(team, team_case(team, case_id))]


@router.post("/teams/{slug}/cases/{case_id}/measurements", response={202: MeasurementAgainOut})
def measure_case_again(request: HttpRequest, slug: str, case_id: int) -> Any:
    """Queue the case's kernel to be measured again (one under way is answered instead); the
    case's verdict and figures stay the first measurement's."""
    team = membership_for(request.user, slug, Permission.RUN).team
    case = team_case(team, case_id)
    if measure_again(team, case, request.user) is None:
        raise Conflict(f"Case {case_id} was never timed: there is nothing to measure again.")
    return 202, measurement_out(measurements_again(team, case)[0])


class KnowledgeHitOut(Schema):
    key: str
    kind: str
    text: str
    similarity: float | None = Field(None, description="cosine similarity to the query")
    target: str
    operator: str
    created_at: datetime
    session: int | None = Field(None, description="a case's session")
    outcome: str | None = Field(None, description="a case's outcome")
    status: str | None = Field(None, description="a rule's status")
    approved_by: str | None = None
    source_case: int | None = Field(None, description="the case a rule was distilled from")


def hit_out(hit: Result) -> dict[str, Any]:
    approved_by = hit.approved.actor.username if hit.approved and hit.approved.actor else None
    return {
        "key": hit.key, "kind": hit.kind, "text": hit.text, "similarity": hit.similarity,
        "target": hit.target, "operator": hit.operator, "created_at": hit.created_at,
        "session": hit.case.session_id if hit.case else None,
        "outcome": hit.case.outcome if hit.case else None,
        "status": hit.rule.status if hit.rule else None, "approved_by": approved_by,
        "source_case": hit.source_case_id,
    }  # fmt: skip


@router.get("/teams/{slug}/knowledge", response=list[KnowledgeHitOut], tags=["knowledge"])
@paginate(LimitOffset)
def search_knowledge(request: HttpRequest, slug: str, q: str = "", kind: Kind | None = None,
                     operator: str = "", outcome: Outcome | None = None,
                     status: RuleStatus | None = None, target: str = "") -> Any:  # fmt: skip
    """Cases, rules and documents by meaning (the query is embedded) under exact filters; the
    newest items without a query. At most the 30 best hits, paged."""
    team = viewable_team(request, slug)
    filters = Filters.from_query({"q": q, "kind": kind or "", "operator": operator,
                                  "outcome": outcome or "", "status": status or "",
                                  "target": target})  # fmt: skip
    return [hit_out(hit) for hit in knowledge_search(team, filters)]
