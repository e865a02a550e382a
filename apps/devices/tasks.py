from __future__ import annotations

import socket
from typing import Any

from celery import Task, shared_task
from django.utils import timezone

from apps.core.events import EventKind, WorkerAlive, publish, team_group


@shared_task(bind=True, acks_late=False, ignore_result=True)
def report_alive(self: Task[Any, Any], team_id: int, check_id: str) -> None:
    """Answer a worker check: say which host and queue picked this up."""
    delivery = self.request.delivery_info or {}
    payload = WorkerAlive(
        check_id=check_id,
        hostname=self.request.hostname or socket.gethostname(),
        queue=str(delivery.get("routing_key") or "?"),
        answered_at=timezone.now().isoformat(),
    )
    publish(team_group(team_id), EventKind.WORKER_ALIVE, payload)


@shared_task(
    name="devices.evaluate", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def evaluate(evaluation_id: int) -> None:
    """Evaluate one candidate. A worker killed mid-way leaves the message unacknowledged, so
    another worker takes it; the attempt counter in the database stops it looping forever."""
    from django.conf import settings

    from apps.devices.services import evaluation_execute

    evaluation_execute(evaluation_id, max_attempts=settings.KOPE_EVAL_MAX_ATTEMPTS)
