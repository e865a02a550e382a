"""The Celery app: settings come from Django's (CELERY_*), tasks from each app's tasks.py."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery, bootsteps

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kope_web.settings.local")

logger = logging.getLogger(__name__)

app = Celery("kope_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class ResumeOnConnect(bootsteps.StartStopStep):
    """Each time a worker connects to the broker, at start and again after losing it, queue
    the work no worker holds: a session whose message the broker refused while it was away
    (a launch during a Redis restart, say) and an evaluation whose device worker died.
    Celery's worker_ready fires at start only; the consumer's steps start on every connection.
    """

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, parent: Any) -> None:
        from apps.devices.tasks import resume_orphaned_evaluations_on
        from apps.runs.tasks import resume_orphaned

        try:
            resume_orphaned.delay()
            resume_orphaned_evaluations_on([queue.name for queue in parent.task_consumer.queues])
        except Exception:  # the broker went again: the next connection tries again
            logger.exception("queueing the work no worker holds failed")


app.steps["consumer"].add(ResumeOnConnect)
