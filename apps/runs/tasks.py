"""The agent worker's tasks: advance a session one iteration at a time."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from celery import Task, shared_task
from django.db import InterfaceError, OperationalError
from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

from apps.core.locks import advisory_locks_held
from apps.memory.models import JournalEvent
from apps.runs.models import OptimizationSession

logger = logging.getLogger(__name__)

ACTIVE = (OptimizationSession.Status.QUEUED, OptimizationSession.Status.RUNNING,
          OptimizationSession.Status.STOPPING)  # fmt: skip
# A session that should be running, that no worker holds and whose journal has not moved for
# this long has lost its message, or waits behind a backlog (an iteration holds the lock).
STALLED_AFTER = timedelta(minutes=3)


# No queue named: the default queue (CELERY_TASK_DEFAULT_QUEUE) is the agent queue.
# A database that cannot be reached is waited for: retries with backoff, about 10 min in all.
@shared_task(name="runs.advance", bind=True, acks_late=True, reject_on_worker_lost=True,
             ignore_result=True, autoretry_for=(OperationalError, InterfaceError),
             retry_backoff=2, retry_backoff_max=60, retry_jitter=True,
             max_retries=10)  # fmt: skip
def advance_session(self: Task[Any, None], session_id: int, ticket: int) -> None:
    """One iteration, then the next as a new task: a worker holds a session only while it
    works on one iteration, so others (and a restarted worker) can take it up."""
    from apps.runs.evaluators import evaluate_on_worker
    from apps.runs.loop import advance
    from apps.runs.policies import policy_for
    from apps.runs.services import enqueue_advance

    current = OptimizationSession.objects.filter(pk=session_id).values_list("ticket", flat=True)
    if current.first() != ticket:
        if self.request.retries:
            # This task's own enqueue may have committed a new ticket while the database
            # went away before answering: the message for that ticket was then never sent.
            # Queue one again; were it sent after all, the older one turns stale.
            enqueue_advance(session_id)
        return  # a newer message for this session is queued: this one is stale
    try:
        more = advance(session_id, evaluate=evaluate_on_worker, policy_for=policy_for)
    except (OperationalError, InterfaceError):
        raise  # the database went away for a moment: retried with backoff
    except Exception as error:  # whatever it was, the session must not stay "running" unseen
        logger.exception("session %s: the loop failed", session_id)
        pause_after_error(session_id, error)
        return
    if more:
        enqueue_advance(session_id)


def pause_after_error(session_id: int, error: Exception) -> None:
    """Pause with the error as the reason: a person can read it, fix the cause and resume
    (the iteration is replayed from the journal). A session a person is stopping ends as a
    stop does instead."""
    from apps.runs.loop import session_pause

    session = OptimizationSession.objects.filter(pk=session_id).first()
    reason = f"the loop stopped on an error: {type(error).__name__}: {str(error)[:500]}"
    if session is not None and not session_pause(session, reason):
        stop_after_error(session, reason)


def stop_after_error(session: OptimizationSession, reason: str) -> None:
    """The operator the stop interrupted is still scored and credited; should that fail too
    (the error may be in scoring itself), the session finishes without it."""
    from apps.runs.evaluators import evaluate_on_worker
    from apps.runs.loop import session_end_stop, session_finish, session_lock
    from apps.runs.policies import policy_for

    try:
        with session_lock(session.pk) as held:
            if held:  # else the worker holding it sees the stop and ends the session
                session_end_stop(session, evaluate=evaluate_on_worker, policy_for=policy_for,
                                 cause=reason)  # fmt: skip
    except Exception:
        logger.exception("session %s: ending the stopped session failed", session.pk)
        session.refresh_from_db()
        if session.status == OptimizationSession.Status.STOPPING:
            session_finish(session, f"{session.status_reason or 'stopped'} ({reason})")


@shared_task(name="runs.resume_orphaned", ignore_result=True)
def resume_orphaned() -> int:
    """Sessions that should be running but that no worker holds (their worker died between
    or during iterations, or the broker refused their message): send their message again,
    with the ticket they have, so one still waiting in a backlog keeps its place (of its two
    messages, the second to arrive finds the session taken or its ticket gone). A duplicate
    is harmless: the session lock lets one advancer in, and replayed steps are not recorded
    twice. A session never queued (ticket 0: made with start=False, as the benchmarks make
    theirs) is run by the process that made it, and left to it."""
    from apps.runs.services import publish_advance

    return sum(publish_advance(pk, ticket) for pk, ticket in unheld_sessions().items())


def resend_stalled(resent: dict[int, int]) -> list[int]:
    """Send each stalled session's message again, with the ticket it has, and return their
    ids: a launch whose message the broker refused while the workers stayed connected (the
    web host lost Redis for a moment) runs without waiting for a worker to reconnect. One
    waiting behind a backlog keeps its place; of its two messages, the second to arrive finds
    the session taken or its ticket gone. `resent` (the caller's, kept between calls) holds
    the ticket each was last sent again with, so a ticket is sent again once per caller."""
    from apps.runs.services import publish_advance

    stalled = unheld_sessions(quiet_for=STALLED_AFTER)
    sent = [pk for pk, ticket in stalled.items()
            if resent.get(pk) != ticket and publish_advance(pk, ticket)]  # fmt: skip
    for pk in set(resent) - set(stalled):
        del resent[pk]
    resent.update((pk, stalled[pk]) for pk in sent)
    return sent


def unheld_sessions(*, quiet_for: timedelta | None = None) -> dict[int, int]:
    """The ticket of each queued, running or stopping session that was queued (ticket above
    0) and that no worker holds; with `quiet_for`, only those that have not moved (made, or
    their latest journal event) for that long."""
    sessions = OptimizationSession.objects.filter(status__in=ACTIVE, ticket__gt=0)
    if quiet_for is not None:
        quiet_since = timezone.now() - quiet_for
        latest_event = JournalEvent.objects.filter(session_id=OuterRef("pk")).order_by("-seq")
        sessions = (
            sessions.filter(created_at__lt=quiet_since)
            .annotate(moved_at=Subquery(latest_event.values("created_at")[:1]))
            .filter(Q(moved_at=None) | Q(moved_at__lt=quiet_since))
        )
    held = sessions_held()
    return {pk: ticket for pk, ticket in sessions.values_list("pk", "ticket") if pk not in held}


def sessions_held() -> set[int]:
    """The sessions a worker advances now."""
    from apps.runs.loop import LOCK_NAMESPACE

    return advisory_locks_held(LOCK_NAMESPACE)


@shared_task(name="runs.embed_cold_start_documents", acks_late=True, ignore_result=True,
             autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3,
             soft_time_limit=300, time_limit=330)  # fmt: skip
def embed_cold_start_documents() -> None:
    """Put the targets' cold-start documents in the knowledge base (queued by `bootstrap`).
    Safe to run twice: keyed by document, and one whose text is unchanged is left alone."""
    from apps.memory.coldstart.vectors import cold_start_vectors_store

    cold_start_vectors_store()
