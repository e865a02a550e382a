"""Sessions over HTTP: launch, list, inspect, control, and read the journal since a seq.

No `from __future__ import annotations` here: ninja reads the parameter annotations of
@paginate-wrapped views at run time, where string annotations cannot be resolved.
"""

from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate

from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.core.errors import NotFound
from apps.core.numbers import WholeNumber
from apps.core.pagination import LimitOffset
from apps.memory.journal import case_of, events_since
from apps.memory.models import JournalEvent
from apps.runs.config import Measurement
from apps.runs.models import OptimizationSession, with_journals
from apps.runs.queue import Line, line_now, queue_place
from apps.runs.services import (
    default_budgets,
    session_create,
    session_pause,
    session_rerun,
    session_resume,
    session_stop,
)

router = Router(tags=["sessions"])


class BudgetsIn(Schema):
    """What is left out comes from the KOPE_SESSION_* / KOPE_CONTEXT_TOKENS settings."""

    rounds: WholeNumber | None = Field(None, ge=1, le=1000)
    tokens: WholeNumber | None = Field(None, ge=1, le=100_000_000)
    plateau: WholeNumber | None = Field(None, ge=1, le=1000)
    context_tokens: WholeNumber | None = Field(None, ge=500, le=200_000)


class MeasurementIn(Schema):
    seeds: WholeNumber = Field(3, ge=1, le=20)
    warmup: WholeNumber = Field(5, ge=0, le=1000)
    repeats: WholeNumber = Field(100, ge=3, le=100_000)


class SessionIn(Schema):
    # Constrained items are checked as text (a lone surrogate is refused), as the fields are.
    operators: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=500
    )
    suite: str | None = Field(None, max_length=64)
    target: str = Field("cpu-c", max_length=32)
    policy: Literal["offline", "claude"] = "offline"
    model: str = Field("", max_length=100)
    memory_mode: Literal["off", "read_only", "read_write"] = "read_write"
    seed: WholeNumber = Field(0, ge=0, le=2**31 - 1)
    budgets: BudgetsIn | None = None
    measurement: MeasurementIn | None = None
    starting_kernels: dict[str, str] = Field(default_factory=dict)
    label: str = Field("", max_length=200)


class SessionOut(Schema):
    id: int
    label: str
    status: str
    status_reason: str
    target: str
    policy: str
    memory_mode: str
    config: dict[str, Any]
    tokens_used: int
    last_seq: int
    rerun_of: int | None
    queue_position: int | None = Field(
        None, description="While queued: its place in the host's line of queued sessions, 1 "
        "for the next to start (null otherwise, or when it was not sent to the workers)."
    )  # fmt: skip
    queue_reason: str = Field("", description="While queued: why it waits.")
    created_by: str | None
    created_at: datetime
    finished_at: datetime | None


class EventOut(Schema):
    seq: int
    kind: str
    payload: dict[str, Any]
    at: datetime = Field(..., alias="created_at")
    case: int | None = Field(None, description="For `case_recorded`: the id of the Case it made.")

    @staticmethod
    def resolve_case(event: JournalEvent) -> int | None:
        return case_of(event)


def session_out(session: OptimizationSession, line: Line | None = None) -> dict[str, Any]:
    fields = ["label", "status", "status_reason", "target", "policy", "memory_mode", "config",
              "created_at", "finished_at"]  # fmt: skip
    journal = session.journal
    place = queue_place(session, line)
    return {
        "id": session.pk, **{name: getattr(session, name) for name in fields},
        "tokens_used": journal.tokens_used, "last_seq": journal.last_seq,
        "rerun_of": session.rerun_of_id,
        "queue_position": place.position if place else None,
        "queue_reason": place.reason if place else "",
        "created_by": session.created_by.username if session.created_by else None,
    }  # fmt: skip


def team_session(request: HttpRequest, slug: str, session_id: int) -> OptimizationSession:
    team = membership_for(request.user, slug, Permission.VIEW).team
    session = OptimizationSession.objects.filter(team=team, pk=session_id).first()
    if session is None:
        raise NotFound(f"No session {session_id}.")
    return session


@router.post("/teams/{slug}/sessions", response={201: SessionOut})
def create_session(request: HttpRequest, slug: str, payload: SessionIn) -> Any:
    team = membership_for(request.user, slug, Permission.RUN).team
    given = payload.budgets.dict(exclude_none=True) if payload.budgets else {}
    budgets = replace(default_budgets(), **given)
    measurement = Measurement(**payload.measurement.dict()) if payload.measurement else None
    session = session_create(
        team=team, user=request.user, operators=payload.operators or None,
        suite=payload.suite, target=payload.target, policy=payload.policy, model=payload.model,
        memory_mode=payload.memory_mode, seed=payload.seed, budgets=budgets,
        measurement=measurement, uploads=payload.starting_kernels, label=payload.label,
    )  # fmt: skip
    return Status(201, session_out(session))


@router.get("/teams/{slug}/sessions", response=list[SessionOut])
@paginate(LimitOffset)
def list_sessions(request: HttpRequest, slug: str) -> Any:
    team = membership_for(request.user, slug, Permission.VIEW).team
    sessions = OptimizationSession.objects.filter(team=team).select_related("created_by")
    line = line_now()
    return [session_out(s, line) for s in with_journals(sessions)]


@router.get("/teams/{slug}/sessions/{session_id}", response=SessionOut)
def get_session(request: HttpRequest, slug: str, session_id: int) -> Any:
    return session_out(team_session(request, slug, session_id))


@router.get("/teams/{slug}/sessions/{session_id}/events", response=list[EventOut])
@paginate(LimitOffset)
def session_events(request: HttpRequest, slug: str, session_id: int, since: int = 0) -> Any:
    session = team_session(request, slug, session_id)
    return events_since(session.pk, max(0, since))  # the page is sliced in the database


@router.post("/teams/{slug}/sessions/{session_id}/pause", response=SessionOut)
def pause_session(request: HttpRequest, slug: str, session_id: int) -> Any:
    session = team_session(request, slug, session_id)
    return session_out(session_pause(session=session, user=request.user))


@router.post("/teams/{slug}/sessions/{session_id}/resume", response=SessionOut)
def resume_session(request: HttpRequest, slug: str, session_id: int) -> Any:
    session = team_session(request, slug, session_id)
    return session_out(session_resume(session=session, user=request.user))


@router.post("/teams/{slug}/sessions/{session_id}/stop", response=SessionOut)
def stop_session(request: HttpRequest, slug: str, session_id: int) -> Any:
    session = team_session(request, slug, session_id)
    return session_out(session_stop(session=session, user=request.user))


@router.post("/teams/{slug}/sessions/{session_id}/rerun", response={201: SessionOut})
def rerun_session(request: HttpRequest, slug: str, session_id: int) -> Any:
    session = team_session(request, slug, session_id)
    return Status(201, session_out(session_rerun(session=session, user=request.user)))
