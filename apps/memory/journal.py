"""Appending to a session's journal: gapless sequence numbers under the session's row lock.

A `case_recorded` event makes its Case in the same transaction, so every Case has its event
and the forest can always be rebuilt from the journal (`manage.py rebuild_forest`).
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet

from apps.core.errors import NotFound
from apps.devices.models import KernelSource
from apps.memory.events import CaseRecorded, PayloadError, payload_of, typed_payload
from apps.memory.models import Case, JournalEvent
from apps.memory.tasks import embed_case_after_commit
from apps.runs.models import OptimizationSession


def journal_append(*, session_id: int, kind: str, payload: dict[str, Any]) -> JournalEvent:
    typed = typed_payload(kind, payload)
    with transaction.atomic():
        session = OptimizationSession.objects.select_for_update().filter(pk=session_id).first()
        if session is None:
            raise NotFound(f"No session {session_id}.")
        seq = session.last_seq + 1
        OptimizationSession.objects.filter(pk=session_id).update(last_seq=seq)
        event = JournalEvent.objects.create(
            session_id=session_id, seq=seq, kind=kind, payload=payload_of(typed)
        )
        if isinstance(typed, CaseRecorded):
            case_from_event(event, typed)
    if isinstance(typed, CaseRecorded):
        embed_case_after_commit(event.pk)  # a worker embeds it; never this request
    return event


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
