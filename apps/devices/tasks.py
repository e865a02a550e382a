from __future__ import annotations

import socket
from typing import Any

from celery import Task, shared_task
from django.db import InterfaceError, OperationalError
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
    name="devices.evaluate", bind=True, acks_late=True, reject_on_worker_lost=True,
    ignore_result=True, autoretry_for=(OperationalError, InterfaceError), retry_backoff=2,
    retry_backoff_max=60, retry_jitter=True, max_retries=10,
)  # fmt: skip
def evaluate(self: Task[Any, Any], evaluation_id: int, only_if_queued: bool = False) -> None:
    """Evaluate one candidate. A worker killed mid-way takes its message with it; the next
    device worker to connect queues the evaluation again (`resume_orphaned_evaluations`), and
    the attempt counter in the database stops it looping forever. A database that cannot be
    reached is waited for (retries with backoff, about 10 min in all): the evaluation runs
    again once it is back, so no verdict is lost."""
    from django.conf import settings

    from apps.devices.services import evaluation_execute

    evaluation_execute(evaluation_id, max_attempts=settings.KOPE_EVAL_MAX_ATTEMPTS,
                       worker=self.request.hostname or "",
                       only_if_queued=only_if_queued)  # fmt: skip


@shared_task(name="devices.resume_orphaned_evaluations", ignore_result=True)
def resume_orphaned_evaluations(queue: str) -> list[int]:
    """Queue again the evaluations of `queue` whose process is gone; one a live process runs
    (a worker, `manage.py evaluate`, on any host) holds its lock and is left alone."""
    from apps.devices.services import orphaned_evaluations

    orphans = orphaned_evaluations(queue)
    for evaluation_id in orphans:
        evaluate.apply_async(args=(evaluation_id,), queue=queue)
    return orphans


def resume_orphaned_evaluations_on(queues: list[str]) -> None:
    """A device worker that connects to the broker (at start, after a crash, after the broker
    was lost: kope_web.celery.ResumeOnConnect) looks for evaluations whose worker died, on
    each device queue it consumes."""
    for queue in queues:
        if queue.startswith("device."):
            resume_orphaned_evaluations.apply_async(args=(queue,), queue=queue)
