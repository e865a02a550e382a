"""Typed live events and the one producer that sends them to websocket groups."""

from __future__ import annotations

from enum import StrEnum
from typing import TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer


class EventKind(StrEnum):
    WORKER_ALIVE = "worker.alive"


class WorkerAlive(TypedDict):
    check_id: str
    hostname: str
    queue: str
    answered_at: str


EventPayload = WorkerAlive


def team_group(team_id: int) -> str:
    return f"team-{team_id}"


def handler_name(kind: EventKind) -> str:
    """Channels dispatches a message of type 'worker.alive' to the consumer's worker_alive."""
    return kind.value.replace(".", "_")


def publish(group: str, kind: EventKind, payload: EventPayload) -> None:
    layer = get_channel_layer()
    message = {"type": kind.value, "kind": kind.value, "payload": dict(payload)}
    async_to_sync(layer.group_send)(group, message)
