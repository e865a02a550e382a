"""Which Celery workers are online, and a round-trip check through each queue."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction

from apps.accounts.models import Team
from apps.devices.tasks import report_alive

CHECK_EXPIRES_S = 30


@dataclass(frozen=True)
class WorkerInfo:
    name: str
    queues: list[str] = field(default_factory=list)
    active_tasks: int = 0
    running: list[str] = field(default_factory=list)  # "runs.advance for 12 s", oldest first


def known_queues() -> list[str]:
    return [settings.AGENT_QUEUE, *(f"device.{t}" for t in settings.DEVICE_TARGETS)]


def workers_online() -> list[WorkerInfo]:
    """Ask every worker over the broker's broadcast channel (kope_web.celery.workbench_status);
    the silent are not listed."""
    replies = current_app.control.broadcast(
        "workbench_status", reply=True, timeout=settings.WORKER_PING_TIMEOUT_S
    )
    answers = {name: answer for reply in replies or [] for name, answer in reply.items()}
    return [worker_info(name, answer) for name, answer in sorted(answers.items())]


def worker_info(name: str, answer: dict[str, Any]) -> WorkerInfo:
    active = answer.get("active") or []  # absent: a worker of an older version ("error")
    return WorkerInfo(
        name=name,
        queues=sorted(queue["name"] for queue in answer.get("queues") or []),
        active_tasks=len(active),
        running=running_tasks(active),
    )


def running_tasks(active: list[dict[str, Any]], now: float | None = None) -> list[str]:
    """What a worker is doing, by task name and age; arguments are left out, since a worker
    serves every team and its task arguments name other teams' rows."""
    now = time.time() if now is None else now
    tasks = sorted(active, key=lambda task: task.get("time_start") or now)
    return [f"{task.get('name', '?')} for {max(0, now - (task.get('time_start') or now)):.0f} s"
            for task in tasks]  # fmt: skip


def worker_check_start(*, team: Team) -> str:
    """Send one check down each queue; each worker that takes one answers on the team's socket."""
    check_id = uuid.uuid4().hex[:12]
    for queue in known_queues():
        transaction.on_commit(
            lambda queue=queue: report_alive.apply_async(  # type: ignore[misc]
                args=(team.pk, check_id), queue=queue, expires=CHECK_EXPIRES_S
            )
        )
    return check_id
