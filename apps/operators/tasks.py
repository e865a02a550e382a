"""Operator work that runs in a worker: imports and loading the built-in suite."""

from __future__ import annotations

from datetime import datetime, timedelta

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.utils import timezone

from apps.operators.importing import import_execute, imports_held
from apps.operators.models import ImportRun
from apps.operators.services import builtin_suite_load

# An import no process holds this long after it was made lost its worker (its message, were
# it waiting behind a backlog, finds the run held or over once a second one took it up).
ORPHANED_AFTER = timedelta(minutes=1)


@shared_task(name="operators.import_folder")
def import_folder(import_run_id: int) -> str:
    """A message delivered twice, or while another worker imports the run, does nothing:
    import_execute lets one process hold a run, and a run that is over is left alone."""
    run = ImportRun.objects.get(pk=import_run_id)
    try:
        return import_execute(run).status
    except SoftTimeLimitExceeded:  # KOPE_TASK_TIME_LIMIT is up for this task, not the import
        import_folder.delay(import_run_id)  # a new task goes on where the report ends
        return ImportRun.Status.RUNNING


@shared_task(name="operators.resume_orphaned_imports", ignore_result=True)
def resume_orphaned_imports() -> list[int]:
    """Imports still running that no process holds: their worker died mid-way (killed, out
    of memory, stopped at once). Queue each again; it goes on where its report ends. Each
    worker queues this as it connects to the broker (kope_web.celery.ResumeOnConnect)."""
    orphans = orphaned_imports()
    for pk in orphans:
        import_folder.delay(pk)
    return orphans


def resend_orphaned_imports(resent: set[int]) -> list[int]:
    """The same for an agent worker that stays connected (kope_web.celery.ResendStalled), so
    an import whose worker died while this one lived is not left until a worker connects:
    the imports made ORPHANED_AFTER ago, each once (`resent`, the caller's, kept between
    calls, holds those sent again that are still orphaned)."""
    orphans = orphaned_imports(made_before=timezone.now() - ORPHANED_AFTER)
    sent = [pk for pk in orphans if pk not in resent]
    for pk in sent:
        import_folder.delay(pk)
    resent.intersection_update(orphans)
    resent.update(sent)
    return sent


def orphaned_imports(*, made_before: datetime | None = None) -> list[int]:
    running = ImportRun.objects.filter(status=ImportRun.Status.RUNNING)
    if made_before is not None:
        running = running.filter(created_at__lt=made_before)
    held = imports_held()
    return [pk for pk in running.order_by("pk").values_list("pk", flat=True) if pk not in held]


@shared_task(name="operators.load_builtin_suite")
def load_builtin_suite() -> int:
    return builtin_suite_load().entries.count()
