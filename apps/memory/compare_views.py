"""The compare page: any two cases of a team side by side, and their profiles.

View state is in the URL (`a`, `b`, `view=split|unified`, `ws=ignore`), so a comparison can
be shared. Profiles come from the evaluations of exactly these kernels; a case without one
can be profiled on request (a device worker runs cachegrind), and each profile downloads as
Chrome Trace JSON for Perfetto.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.accounts.access import team_view
from apps.accounts.models import Membership, Team
from apps.accounts.roles import Permission
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation, Profile
from apps.devices.services import evaluation_start
from apps.memory.compare import diff_rows, measurement_rows, unified_diff_text, unified_rows
from apps.memory.forest_views import as_int
from apps.memory.models import Case
from apps.memory.profiles import line_costs_side_by_side
from apps.memory.selectors import case_evaluation, team_case

PENDING = (Evaluation.Status.QUEUED, Evaluation.Status.RUNNING)
DIFF2HTML_FORMATS = {"split": "side-by-side", "unified": "line-by-line"}


@dataclass
class Side:
    """One case of the comparison with what was measured of it."""

    case: Case
    source: str
    samples_ms: list[float] = field(default_factory=list)
    reference_median_ms: float | None = None
    profile: Profile | None = None
    profiling: Evaluation | None = None  # a profile evaluation still queued or running
    profile_error: str = ""

    @property
    def label(self) -> str:
        return f"#{self.case.pk}"

    def measures(self) -> dict[str, Any]:
        derived = (self.profile.data.get("derived") or {}) if self.profile else {}
        return {"latency_ms": self.case.latency_ms,
                "speedup_vs_reference": self.case.speedup_vs_reference,
                "speedup_vs_parent": self.case.speedup_vs_parent, **derived}  # fmt: skip


def profile_evaluations(team: Team, case: Case) -> Any:
    """The evaluations that profile the case's kernel as its verdict measured it: the same
    code built with the same flags and run on as many threads (other flags are other machine
    code, with other instructions and cache misses)."""
    measured = profile_settings(team, case)
    return Evaluation.objects.filter(
        team=team, source_id=case.source_id, version_id=case.version_id, target=case.target,
        options__profile=True, options__extra_flags=list(measured.extra_flags),
        options__threads=measured.threads,
    )  # fmt: skip


def side_of(team: Team, case: Case) -> Side:
    side = Side(case=case, source=case.source.text if case.source else "")
    evaluation = case_evaluation(team, case)
    timed = (evaluation.verdict or {}).get("timed") if evaluation else None
    if timed:
        side.samples_ms = [float(s) for s in timed.get("candidate_samples_ms", [])]
        side.reference_median_ms = (timed.get("reference") or {}).get("median_ms")
    if case.source_id is None:
        return side
    requested = profile_evaluations(team, case).order_by("-created_at")
    side.profile = Profile.objects.filter(evaluation__in=requested).order_by("-created_at").first()
    latest = requested.first()
    if latest is not None and latest.status in PENDING:
        side.profiling = latest
    elif side.profile is None and latest is not None:
        profiled = (latest.verdict or {}).get("profiled") or {}
        side.profile_error = latest.error or profiled.get("reason", "")
    return side


@dataclass(frozen=True)
class ViewState:
    a: int | None
    b: int | None
    view: str  # split or unified
    ignore_whitespace: bool

    @classmethod
    def from_query(cls, query: QueryDict) -> ViewState:
        view = "unified" if query.get("view") == "unified" else "split"
        return cls(as_int(query.get("a", "")), as_int(query.get("b", "")), view,
                   query.get("ws") == "ignore")  # fmt: skip

    def query(self, **changes: Any) -> str:
        state = {"a": self.a, "b": self.b, "view": self.view,
                 "ws": "ignore" if self.ignore_whitespace else "", **changes}  # fmt: skip
        parts = QueryDict(mutable=True)
        for key, value in state.items():
            if value not in (None, ""):
                parts[key] = str(value)
        return parts.urlencode()


@team_view()
def compare_page(request: HttpRequest, membership: Membership) -> HttpResponse:
    team = membership.team
    state = ViewState.from_query(request.GET)
    case_a, case_b = team_case(team, state.a), team_case(team, state.b)
    missing = [f"case #{n}" for n, c in ((state.a, case_a), (state.b, case_b)) if n and c is None]
    if missing:
        raise Http404(f"No {' or '.join(missing)} in this team.")
    context: dict[str, Any] = {"section": "forest", "state": state,
                               "can_run": membership.allows(Permission.RUN)}  # fmt: skip
    if case_a is None or case_b is None:
        return render(request, "memory/compare.html", {**context, "picking": True})
    context.update(comparison(team, state, side_of(team, case_a), side_of(team, case_b)))
    if request.GET.get("part") == "profiles":  # polled while a profile is being made
        return render(request, "memory/compare.html#profiles", context)
    return render(request, "memory/compare.html", context)


def comparison(team: Team, state: ViewState, a: Side, b: Side) -> dict[str, Any]:
    rows = diff_rows(a.source, b.source, ignore_whitespace=state.ignore_whitespace)
    # One file name on both sides (diff2html strips a/ and b/): a changed name reads "renamed".
    diff_text = unified_diff_text(a.source, b.source, old_name="a/kernel.c",
                                  new_name="b/kernel.c",
                                  ignore_whitespace=state.ignore_whitespace)  # fmt: skip
    timeline = {"a": {"label": f"case {a.label}", "samples_ms": a.samples_ms,
                      "reference_median_ms": a.reference_median_ms},
                "b": {"label": f"case {b.label}", "samples_ms": b.samples_ms,
                      "reference_median_ms": b.reference_median_ms}}  # fmt: skip
    return {
        "a": a, "b": b, "same_code": a.source == b.source, "split_rows": rows,
        "unified_rows": unified_rows(rows), "diff_text": diff_text,
        "diff_options": {"outputFormat": DIFF2HTML_FORMATS[state.view]},
        "measurements": measurement_rows(a.measures(), b.measures()),
        "line_costs": line_costs_side_by_side(a.profile.data if a.profile else None,
                                              b.profile.data if b.profile else None),
        "timeline": timeline, "has_samples": bool(a.samples_ms or b.samples_ms),
        "profiling": bool(a.profiling or b.profiling),
        "links": {"split": state.query(view="split"), "unified": state.query(view="unified"),
                  "whitespace": state.query(ws="" if state.ignore_whitespace else "ignore"),
                  "swap": state.query(a=state.b, b=state.a)},
    }  # fmt: skip


@require_POST
@team_view(Permission.RUN)
def compare_profile(request: HttpRequest, membership: Membership) -> HttpResponse:
    """Queue a cachegrind profile of each compared kernel that has none, with the settings
    its verdict was measured with."""
    team = membership.team
    state = ViewState.from_query(request.POST)
    for case_id in (state.a, state.b):
        case = team_case(team, case_id)
        if case is None:
            raise Http404(f"No case #{case_id} in this team.")
        side = side_of(team, case)
        if side.profile is None and side.profiling is None and case.source is not None:
            profile_start(team, case, request.user)
    return redirect(f"{reverse('compare', kwargs={'team': team.slug})}?{state.query()}")


def profile_start(team: Team, case: Case, user: Any) -> Evaluation:
    assert case.source is not None
    return evaluation_start(version=case.version, source_text=case.source.text,
                            options=profile_settings(team, case), team=team, user=user,
                            target=case.target)  # fmt: skip


def profile_settings(team: Team, case: Case) -> EvalSettings:
    """A profile's settings: those the case's verdict was measured with, profiling."""
    measured = case_evaluation(team, case)
    options = dict(measured.options) if measured is not None else {}
    known = EvalSettings.__dataclass_fields__
    measured_with = EvalSettings.from_settings(**{k: v for k, v in options.items() if k in known})
    # A profile is of the kernel alone: no baseline timed beside it.
    return replace(measured_with, seeds=1, profile=True, debug=False,
                   extra_flags=tuple(measured_with.extra_flags), baseline_sha256="",
                   baseline_flags=())  # fmt: skip
