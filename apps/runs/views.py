"""Session pages: the list, the launch form, and a session with its live event log."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.accounts.access import team_view
from apps.accounts.models import Membership
from apps.accounts.roles import Permission
from apps.core.code_html import c_code_html
from apps.core.errors import DomainError
from apps.core.pages import one_moment, page_of
from apps.memory.journal import case_of, incumbent_cases
from apps.memory.models import Case, JournalEvent
from apps.operators import selectors
from apps.runs.config import Measurement, SessionConfig
from apps.runs.estimate import duration_text, measured_pace, queue_ahead, run_estimate
from apps.runs.event_text import event_summary
from apps.runs.forms import LaunchForm
from apps.runs.models import OptimizationSession, with_journals
from apps.runs.queue import line_now, queue_place
from apps.runs.services import (
    ACTS_IN,
    default_budgets,
    session_create,
    session_pause,
    session_rerun,
    session_resume,
    session_stop,
)

LAUNCH_TARGET = "cpu-c"  # the launch page's sessions run on the default target
LOG_EVENTS = 500  # the page shows the latest ones; the API has them all
CONTROLS = {"pause": session_pause, "resume": session_resume, "stop": session_stop}


@team_view()
def session_list(request: HttpRequest, membership: Membership) -> HttpResponse:
    sessions = OptimizationSession.objects.filter(team=membership.team).select_related("created_by")
    page = page_of(request, sessions.order_by("-created_at", "-pk"))
    page.object_list = with_journals(page.object_list)  # each row shows its tokens
    line = line_now()  # a queued session's row says where it stands in line
    rows = [(session, queue_place(session, line)) for session in page.object_list]
    context = {"section": "sessions", "sessions": page, "rows": rows, "page": page,
               "can_run": membership.allows(Permission.RUN)}  # fmt: skip
    return render(request, "runs/session_list.html", context)


def launch_form(membership: Membership, data: Any = None, files: Any = None) -> LaunchForm:
    team = membership.team
    # A team's own operator or suite and a shared one of the same slug are one choice: the
    # launch runs the team's own (operator_get, suite_get), as its pages show.
    operators = list(dict.fromkeys(v.operator.slug for v in selectors.latest_versions(
        selectors.operators_visible_to(team))))  # fmt: skip
    suites = list(dict.fromkeys(s.slug for s in selectors.suites_visible_to(team)))
    return LaunchForm(data, files, operators=operators, suites=suites)


def launch_estimate(membership: Membership, form: LaunchForm, data: Any) -> dict[str, Any]:
    """The run's size for the form's current values (its initial ones before any change);
    a value that is not valid yet counts as its default."""
    form.is_valid()
    values = {**{name: field.initial for name, field in form.fields.items()},
              **getattr(form, "cleaned_data", {})}  # fmt: skip
    known = {slug for slug, _ in form.fields["operators"].choices}  # type: ignore[attr-defined]
    operators = len(set(data.getlist("operators")) & known) if data else 0
    if values.get("suite"):
        operators = selectors.suite_get(membership.team, values["suite"]).entries.count()
    budgets = default_budgets()
    policy = values.get("policy") or "offline"
    pace = measured_pace(team=membership.team, target=LAUNCH_TARGET, policy=policy)
    estimate = run_estimate(
        operators=operators, rounds=values.get("rounds") or budgets.rounds, policy=policy,
        context_tokens=budgets.context_tokens, token_budget=budgets.tokens, pace=pace,
        ahead=queue_ahead(pace=pace),
    )  # fmt: skip
    return {"estimate": estimate, "target": LAUNCH_TARGET, "policy": policy,
            "per_round": duration_text(pace.seconds_per_round if pace else None),
            "ahead_time": duration_text(estimate.ahead.seconds),
            "total_time": duration_text(estimate.total_seconds)}  # fmt: skip


@team_view(Permission.RUN)
def session_launch(request: HttpRequest, membership: Membership) -> HttpResponse:
    if request.GET.get("part") == "estimate":  # the form asks again on every change
        context = launch_estimate(membership, launch_form(membership, request.GET), request.GET)
        return render(request, "runs/session_launch.html#estimate", context)
    data = request.POST if request.method == "POST" else None
    form = launch_form(membership, data, request.FILES if data is not None else None)
    if data is not None and form.is_valid():
        values = form.cleaned_data
        try:
            session = session_create(
                team=membership.team, user=request.user, operators=values["operators"] or None,
                suite=values["suite"] or None, policy=values["policy"], model=values["model"],
                memory_mode=values["memory_mode"], seed=values["seed"], label=values["label"],
                budgets=replace(default_budgets(), rounds=values["rounds"],
                                plateau=values["plateau"]),
                measurement=Measurement(repeats=values["repeats"]),
                uploads=values["starting_kernels"],
            )  # fmt: skip
        except DomainError as error:
            form.add_error(None, str(error))
        else:
            return redirect("session", team=membership.team.slug, session_id=session.pk)
    estimate = launch_estimate(membership, form, data)
    context = {"section": "sessions", "form": form, **estimate}
    refused = data is not None  # sent back with what was wrong, as the other forms are: 400
    return render(request, "runs/session_launch.html", context, status=400 if refused else 200)


def team_session(membership: Membership, session_id: int) -> OptimizationSession:
    session = OptimizationSession.objects.filter(team=membership.team, pk=session_id).first()
    if session is None:
        raise Http404(f"No session {session_id}.")
    return session


@team_view()
def session_detail(request: HttpRequest, membership: Membership, session_id: int) -> HttpResponse:
    # The page's last seq, the log, the chart and the token count must agree: the socket asks
    # for the events after that seq, so a case read here but not in the log would come twice.
    with one_moment():
        return session_page(request, membership, session_id)


def session_page(request: HttpRequest, membership: Membership, session_id: int) -> HttpResponse:
    session = team_session(membership, session_id)
    config = SessionConfig.from_json(session.config)
    part = request.GET.get("part")
    if part == "operators":  # the live page refreshes these parts
        context = {"session": session, "operators": operator_rows(session)}
        return render(request, "runs/session_detail.html#operators", context)
    if part == "context":
        return render(request, "runs/session_detail.html#context", context_composition(session))
    if part == "queue":  # asked again when the line moves
        return render(request, "runs/session_detail.html#queue", {"queue": queue_place(session)})
    latest = JournalEvent.objects.filter(session_id=session.pk).order_by("-seq")[:LOG_EVENTS]
    events = list(latest)[::-1]
    chart = latency_chart(session, config, request.GET.get("operator", ""))
    operators = operator_rows(session)
    context = {
        "section": "sessions", "session": session, "config": config,
        "operators": operators, "can_run": membership.allows(Permission.RUN),
        "none_correct": session.status == session.Status.FINISHED
        and not any(row["best"] for row in operators),
        "events": [(e, event_summary(e.kind, e.payload), case_of(e)) for e in events],
        "last_seq": events[-1].seq if events else 0,
        "first_shown": events[0].seq if events else 0,
        "chart": chart, "chart_rows": chart["attempts"].get(chart["operator"], []),
        "token_budget": config.budgets.tokens * len(config.operators),
        "controls": session_controls(session.status),
        "queue": queue_place(session),
        **context_composition(session),
    }  # fmt: skip
    return render(request, "runs/session_detail.html", context)


BUTTON_LABELS = {"pause": "Pause", "resume": "Resume", "stop": "Stop"}


def session_controls(status: str) -> list[dict[str, object]]:
    """Each control, enabled only in the statuses it acts in (session-live.js keeps that so
    as the status changes)."""
    return [
        {"action": action, "label": BUTTON_LABELS[action], "allowed_in": " ".join(statuses),
         "enabled": status in statuses}
        for action, statuses in ACTS_IN.items()
    ]  # fmt: skip


def latency_chart(
    session: OptimizationSession, config: SessionConfig, chosen: str
) -> dict[str, Any]:
    """Every attempt per operator (iteration, latency, outcome, speedup over its parent timed
    beside it, whether it became the incumbent), for the latency chart; the chosen operator is
    the one in the URL, else the latest one with attempts. The incumbent is the journal's, not
    the lowest latency: latencies of attempts timed minutes apart differ with the host's load,
    and a candidate replaces the incumbent only when it is faster timed beside it."""
    slugs = {entry.version_id: entry.slug for entry in config.operators}
    attempts: dict[str, list[dict[str, Any]]] = {entry.slug: [] for entry in config.operators}
    incumbents = incumbent_cases(session.pk)
    rows = (
        Case.objects.filter(session_id=session.pk)
        .order_by("iteration", "pk")
        .values("pk", "iteration", "version_id", "outcome", "correct", "latency_ms",
                "speedup_vs_parent", "strategy")
    )  # fmt: skip
    latest = ""
    for row in rows:
        slug = slugs.get(row["version_id"])
        if slug is None:
            continue
        attempts[slug].append(
            {
                "case": row["pk"],
                "iteration": row["iteration"],
                "outcome": row["outcome"],
                "correct": row["correct"],
                "latency_ms": row["latency_ms"],
                "vs_parent": row["speedup_vs_parent"],
                "incumbent": row["pk"] in incumbents,
                "strategy": row["strategy"],
            }
        )
        latest = slug
    operator = chosen if chosen in attempts else latest or next(iter(attempts), "")
    return {"operator": operator, "versions": {str(k): v for k, v in slugs.items()},
            "attempts": attempts}  # fmt: skip


def context_composition(session: OptimizationSession) -> dict[str, Any]:
    """The latest iteration's assembled context: tokens per tier, and each retrieved item with
    whether the policy adopted it and why."""
    journal = JournalEvent.objects.filter(session_id=session.pk)
    assembled = journal.filter(kind="context_assembled").order_by("-seq").first()
    if assembled is None:
        return {"composition": None}
    payload = assembled.payload
    proposed = journal.filter(
        kind="candidate_proposed", payload__operator=payload["operator"],
        payload__iteration=payload["iteration"],
    ).first()  # fmt: skip
    adopted = proposed.payload.get("adopted", []) if proposed else []
    why = {a["key"]: a.get("why", "") for a in adopted}
    items = [{**item, "adopted": item["key"] in why, "why": why.get(item["key"], "")}
             for item in payload.get("retrieved", [])]  # fmt: skip
    tiers = payload.get("tokens_per_tier", {})
    return {"composition": {
        "operator": payload["operator"], "iteration": payload["iteration"],
        "tokens": payload["tokens"], "budget": payload["budget"],
        "tiers": [{"tier": tier, "tokens": n, "percent": percent(n, payload["budget"])}
                  for tier, n in tiers.items()],
        "items": items, "decided": proposed is not None,
        "no_proposal": proposed is None and no_proposal_follows(session, assembled),
        "hot_rules": payload.get("hot_rules", []), "cut": payload.get("cut", []),
    }}  # fmt: skip


# After one of these, the context assembled before it will get no proposal: the policy proposed
# nothing (the operator finished) or the session stopped, paused or ended first.
ENDS_AN_ITERATION = ("operator_finished", "session_finished", "session_stopped", "session_paused")


def no_proposal_follows(session: OptimizationSession, assembled: JournalEvent) -> bool:
    if session.status in (session.Status.FINISHED, session.Status.FAILED):
        return True
    later = JournalEvent.objects.filter(session_id=session.pk, seq__gt=assembled.seq,
                                        kind__in=ENDS_AN_ITERATION)  # fmt: skip
    return later.exists()


def percent(part: int, whole: int) -> int:
    return round(100 * part / whole) if whole else 0


def operator_rows(session: OptimizationSession) -> list[dict[str, Any]]:
    """Per operator: where it stands, its incumbent and the incumbent's code."""
    config = SessionConfig.from_json(session.config)
    journal = JournalEvent.objects.filter(session_id=session.pk)
    finished = {e.payload["operator"]: e.payload
                for e in journal.filter(kind="operator_finished")}  # fmt: skip
    incumbents: dict[str, int] = {}
    for event in journal.filter(kind="incumbent_replaced").order_by("seq"):
        incumbents[event.payload["operator"]] = event.payload["case_id"]
    cases = Case.objects.filter(pk__in=incumbents.values()).select_related("source")
    by_id = {c.pk: c for c in cases}
    rows = []
    for entry in config.operators:
        best = by_id.get(incumbents.get(entry.slug, -1))
        done = finished.get(entry.slug)
        rows.append({"slug": entry.slug, "version": entry.version, "best": best,
                     "finished": done, "code": highlighted(best)})  # fmt: skip
    return rows


def highlighted(case: Case | None) -> str:
    """The case's kernel as highlighted HTML ("" without one)."""
    if case is None or case.source is None:
        return ""
    return c_code_html(case.source.text)


@require_POST
@team_view(Permission.RUN)
def session_control(
    request: HttpRequest, membership: Membership, session_id: int, action: str
) -> HttpResponse:
    session = team_session(membership, session_id)
    if action == "rerun":
        rerun = session_rerun(session=session, user=request.user)
        return redirect("session", team=membership.team.slug, session_id=rerun.pk)
    control = CONTROLS.get(action)
    if control is None:
        raise Http404(f"No action {action!r}.")
    try:
        control(session=session, user=request.user)
    except DomainError as error:
        messages.error(request, str(error))
    return redirect("session", team=membership.team.slug, session_id=session.pk)
