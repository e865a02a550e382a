"""The agent worker's share of exports: make a large one, with its progress in its row."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task
from django.db import InterfaceError, OperationalError


# No queue named: the default queue (CELERY_TASK_DEFAULT_QUEUE) is the agent queue. Safe to
# run twice: the export is claimed with a conditional update, and a made one is left alone.
# A database that cannot be reached is waited for: retries with backoff.
@shared_task(name="reports.make_export", bind=True, acks_late=True, reject_on_worker_lost=True,
             ignore_result=True, autoretry_for=(OperationalError, InterfaceError),
             retry_backoff=True, retry_jitter=True, max_retries=5, soft_time_limit=900,
             time_limit=960)  # fmt: skip
def make_export(self: Task[Any, None], export_id: int) -> None:
    from apps.reports.services import export_execute, export_lost_in

    if export_execute(export_id, retrying=self.request.retries > 0) is not None:
        return
    wait = export_lost_in(export_id)
    if wait is not None and not self.request.is_eager:  # eagerly, it would run again at once
        # Another attempt holds the export, or held it and died with its worker, whose message,
        # given back, is this one: look again once the export counts as lost, and take it up.
        make_export.apply_async((export_id,), countdown=wait.total_seconds() + 1)
