"""Typed live events and the one producer that sends them to websocket groups."""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)


class EventKind(StrEnum):
    WORKER_ALIVE = "worker.alive"
    SESSION_EVENT = "session.event"
    QUEUE_MOVED = "queue.moved"
    EVALUATION_STATUS = "evaluation.status"


class WorkerAlive(TypedDict):
    check_id: str
    hostname: str
    queue: str
    answered_at: str


class SessionEvent(TypedDict):
    """A journal event as the session's watchers receive it."""

    session: int
    seq: int
    kind: str
    payload: dict[str, object]
    at: str
    case: int | None  # the Case a `case_recorded` event made (its id is the event's)


class QueueMoved(TypedDict):
    """To a queued session's watchers: the line moved (a session started, paused or ended);
    its page asks again where the session stands."""

    session: int


class EvaluationStatus(TypedDict):
    """An evaluation's status changed (queued, running, done, failed); its watchers read the
    row again for the verdict."""

    evaluation: int
    status: str


EventPayload = WorkerAlive | SessionEvent | QueueMoved | EvaluationStatus


def team_group(team_id: int) -> str:
    return f"team-{team_id}"


def session_group(session_id: int) -> str:
    return f"session-{session_id}"


def evaluation_group(evaluation_id: int) -> str:
    return f"evaluation-{evaluation_id}"


def handler_name(kind: EventKind) -> str:
    """Channels dispatches a message of type 'worker.alive' to the consumer's worker_alive."""
    return kind.value.replace(".", "_")


def publish(group: str, kind: EventKind, payload: EventPayload) -> None:
    layer = get_channel_layer()
    message = {"type": kind.value, "kind": kind.value, "payload": dict(payload)}
    async_to_sync(layer.group_send)(group, message)


def publish_quietly(group: str, kind: EventKind, payload: EventPayload) -> None:
    """Publish, and only log when the channel layer is down: watchers catch up from the
    journal when they reconnect, so a lost live message loses nothing."""
    try:
        publish(group, kind, payload)
    except Exception:  # any layer failure (Redis restarting, PostgreSQL gone) is the same here
        logger.warning("could not publish %s to %s", kind.value, group, exc_info=True)
