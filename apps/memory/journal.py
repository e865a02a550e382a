"""Appending to a session's journal: gapless sequence numbers under the journal's row lock.

A `case_recorded` event makes its Case in the same transaction, so every Case has its event
and the forest can always be rebuilt from the journal (`manage.py rebuild_forest`).
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.db.models import F, QuerySet

from apps.core.errors import NotFound
from apps.core.events import EventKind, SessionEvent, publish_quietly, session_group
from apps.devices.models import KernelSource
from apps.memory.events import (
    CaseRecorded,
    ModelCalled,
    PayloadError,
    payload_of,
    typed_payload,
)
from apps.memory.models import Case, Journal, JournalEvent
from apps.memory.tasks import embed_case_after_commit


def journal_append(
    *, session_id: int, kind: str, payload: dict[str, Any], step: str = ""
) -> JournalEvent:
    """Append an event (and, for `case_recorded`, its Case); watchers get it after commit.

    With a `step` key, a step already in the journal is returned as it is instead of being
    written again: the loop replays an interrupted iteration through the same keys.
    """
    return journal_record(session_id=session_id, kind=kind, payload=payload, step=step)[0]


def journal_record(
    *, session_id: int, kind: str, payload: dict[str, Any], step: str = ""
) -> tuple[JournalEvent, bool]:
    """`journal_append`, also saying whether the event is new (False: the step was there)."""
    typed = typed_payload(kind, payload)
    with transaction.atomic():
        journal = Journal.objects.select_for_update().filter(pk=session_id).first()
        if journal is None:
            raise NotFound(f"No session {session_id}.")
        if step:
            done = JournalEvent.objects.filter(session_id=session_id, step=step).first()
            if done is not None:
                return done, False
        seq = journal.last_seq + 1
        Journal.objects.filter(pk=session_id).update(last_seq=seq)
        event = JournalEvent.objects.create(
            session_id=session_id, seq=seq, kind=kind, step=step, payload=payload_of(typed)
        )
        if isinstance(typed, CaseRecorded):
            case_from_event(event, typed)
            # Only a session that learns turns its attempts into memory (read-only and off
            # sessions write nothing there); a worker embeds it, never this request.
            if journal.memory_mode == "read_write":
                embed_case_after_commit(event.pk)
        if isinstance(typed, ModelCalled):
            tokens = sum(typed.usage.values())
            Journal.objects.filter(pk=session_id).update(tokens_used=F("tokens_used") + tokens)
        transaction.on_commit(lambda: publish_event(event))
    return event, True


def publish_event(event: JournalEvent) -> None:
    publish_quietly(session_group(event.session_id), EventKind.SESSION_EVENT, session_event(event))


def session_event(event: JournalEvent) -> SessionEvent:
    """The event as watchers receive it, live or from the journal after a reconnect."""
    return SessionEvent(
        session=event.session_id, seq=event.seq, kind=event.kind, payload=event.payload,
        at=event.created_at.isoformat(), case=case_of(event),
    )  # fmt: skip


def case_of(event: JournalEvent) -> int | None:
    """The Case a `case_recorded` event made: its id is the event's."""
    return event.pk if event.kind == "case_recorded" else None


def incumbent_cases(session_id: int) -> set[int]:
    """The cases the session made its incumbent, each in turn (its `incumbent_replaced`
    events): not the lowest latencies, since a candidate replaces the incumbent only when it is
    faster timed beside it."""
    events = JournalEvent.objects.filter(session_id=session_id, kind="incumbent_replaced")
    return set(events.values_list("payload__case_id", flat=True))


def step_done(session_id: int, step: str) -> JournalEvent | None:
    return JournalEvent.objects.filter(session_id=session_id, step=step).first()


def case_from_event(event: JournalEvent, record: CaseRecorded | None = None) -> Case:
    """The Case an event describes; its id is the event's id, so a rebuild gives the same ids."""
    record = record or CaseRecorded(**event.payload)
    if (
        record.parent_case_id is not None
        and not Case.objects.filter(pk=record.parent_case_id).exists()
    ):
        raise PayloadError(f"parent case {record.parent_case_id} does not exist (yet)")
    source = None
    if record.source_sha256:
        source = KernelSource.objects.filter(sha256=record.source_sha256).first()
        if source is None:
            raise PayloadError(f"no kernel source with hash {record.source_sha256}")
    return Case.objects.create(
        event=event, session_id=event.session_id, iteration=record.iteration,
        version_id=record.version_id, target=record.target, parent_id=record.parent_case_id,
        strategy=record.strategy, tags=record.tags, source=source, validation=record.validation,
        latency_ms=record.latency_ms, speedup_vs_reference=record.speedup_vs_reference,
        speedup_vs_parent=record.speedup_vs_parent, feedback=record.feedback,
        outcome=record.outcome, correct=record.correct, confidence=record.confidence,
        retrieved=record.retrieved, adopted=record.adopted, created_at=event.created_at,
    )  # fmt: skip


def journal_last_seq(session_id: int) -> int:
    """The session's last seq, 0 before its first event (or for no session)."""
    ends = Journal.objects.filter(pk=session_id).values_list("last_seq", flat=True)
    return ends.first() or 0


def journal_exists(session_id: int) -> bool:
    return Journal.objects.filter(pk=session_id).exists()


def events_since(session_id: int, seq: int) -> QuerySet[JournalEvent]:
    return JournalEvent.objects.filter(session_id=session_id, seq__gt=seq).order_by("seq")


@transaction.atomic
def forest_rebuild(*, session_id: int | None = None) -> int:
    """Drop the Cases (of one session, or all) and make them again from the journal."""
    cases = Case.objects.all() if session_id is None else Case.objects.filter(session_id=session_id)
    with connection.cursor() as cursor:
        # One statement: parents and children go together (the foreign keys are deferred).
        sql, params = cases.values("pk").query.sql_with_params()
        cursor.execute(f"DELETE FROM memory_case WHERE event_id IN ({sql})", params)  # noqa: S608
    events = JournalEvent.objects.filter(kind="case_recorded").order_by("session_id", "seq")
    if session_id is not None:
        events = events.filter(session_id=session_id)
    count = 0
    for event in events.iterator():
        case_from_event(event)
        count += 1
    return count
