"""The Celery app: settings come from Django's (CELERY_*), tasks from each app's tasks.py."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery, bootsteps, signals
from celery.worker import control
from celery.worker.control import active, active_queues  # type: ignore[attr-defined]  # unstubbed

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kope_web.settings.local")

logger = logging.getLogger(__name__)

app = Celery("kope_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class ResumeOnConnect(bootsteps.StartStopStep):
    """Each time a worker connects to the broker, at start and again after losing it, queue
    the work no worker holds: a session whose message the broker refused while it was away
    (a launch during a Redis restart, say), an evaluation whose device worker died and an
    import whose agent worker died.
    Celery's worker_ready fires at start only; the consumer's steps start on every connection.
    """

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, parent: Any) -> None:
        from apps.devices.tasks import resume_orphaned_evaluations_on
        from apps.operators.tasks import resume_orphaned_imports
        from apps.runs.tasks import resume_orphaned

        try:
            resume_orphaned.delay()
            resume_orphaned_imports.delay()
            resume_orphaned_evaluations_on([queue.name for queue in parent.task_consumer.queues])
        except Exception:  # the broker went again: the next connection tries again
            logger.exception("queueing the work no worker holds failed")


class ResendStalled(bootsteps.StartStopStep):
    """While an agent worker is connected, it looks for stalled sessions every SWEEP_EVERY_S
    (`resend_stalled`): a message the broker refused while this worker stayed connected (the
    web host lost Redis for a moment) is not waited for until the next reconnection. So too
    an import whose worker died while this one stayed (`resend_orphaned_imports`)."""

    requires = ("celery.worker.consumer.tasks:Tasks",)
    SWEEP_EVERY_S = 30.0

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.sweep: Any = None
        self.resent: dict[int, int] = {}  # kept across sweeps: a ticket is sent again once
        self.resent_imports: set[int] = set()  # and an orphaned import

    def start(self, parent: Any) -> None:
        queues = {queue.name for queue in parent.task_consumer.queues}
        if app.conf.task_default_queue in queues:  # the agent queue
            self.sweep = parent.timer.call_repeatedly(self.SWEEP_EVERY_S, self.resend)

    def resend(self) -> None:
        from django.db import connection

        from apps.operators.tasks import resend_orphaned_imports
        from apps.runs.tasks import resend_stalled

        try:
            if sent := resend_stalled(self.resent):
                logger.warning("sessions %s had stalled: their next iteration is queued again",
                               sent)  # fmt: skip
            if imports := resend_orphaned_imports(self.resent_imports):
                logger.warning("imports %s had lost their worker: queued again", imports)
        except Exception:  # the database or the broker went: the next sweep tries again
            logger.exception("looking for stalled sessions and orphaned imports failed")
        finally:
            connection.close()  # none kept open in the worker's main process between sweeps

    def stop(self, parent: Any) -> None:
        if self.sweep is not None:
            self.sweep.cancel()
            self.sweep = None

    shutdown = stop


app.steps["consumer"].add(ResumeOnConnect)
app.steps["consumer"].add(ResendStalled)


@signals.celeryd_after_setup.connect
def remove_abandoned_work_dirs(sender: str, instance: Any, **kwargs: Any) -> None:
    """A worker that starts (again, after its predecessor was killed mid-evaluation or
    mid-import) removes the work dirs the dead left in /dev/shm and the temp folder: nothing
    else would, and /dev/shm is memory. Before its pool starts, so it runs once per worker."""
    from apps.devices.services import work_dirs_abandoned_remove

    try:
        removed = work_dirs_abandoned_remove()
    except Exception:  # a work dir it cannot read must not keep the worker from starting
        logger.exception("removing the work dirs of dead evaluations failed")
        return
    if removed:
        logger.warning("removed %d abandoned work dir(s): %s", len(removed),
                       ", ".join(map(str, removed)))  # fmt: skip


@control.inspect_command()
def workbench_status(state: Any, **kwargs: Any) -> dict[str, Any]:
    """The queues a worker consumes and the tasks it runs, in one answer: the Workers page
    asks with one broadcast and waits its timeout once, not once per question."""
    return {"queues": active_queues(state), "active": active(state)}
