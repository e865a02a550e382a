"""Operator work that runs in a worker: imports and loading the built-in suite."""

from __future__ import annotations

from celery import shared_task

from apps.operators.importing import import_execute, import_is_held
from apps.operators.models import ImportRun
from apps.operators.services import builtin_suite_load


@shared_task(name="operators.import_folder")
def import_folder(import_run_id: int) -> str:
    """A message delivered twice, or while another worker imports the run, does nothing:
    import_execute lets one process hold a run, and a run that is over is left alone."""
    run = ImportRun.objects.get(pk=import_run_id)
    return import_execute(run).status


@shared_task(name="operators.resume_orphaned_imports", ignore_result=True)
def resume_orphaned_imports() -> list[int]:
    """Imports still running that no process holds: their worker died mid-way (killed, out
    of memory, stopped at once), or the broker lost their message. Queue each again; it goes
    on where its report ends. A run whose message is still queued gets a second one, which
    finds it held or over."""
    running = ImportRun.objects.filter(status=ImportRun.Status.RUNNING).values_list("pk", flat=True)
    orphans = [pk for pk in running if not import_is_held(pk)]
    for pk in orphans:
        import_folder.delay(pk)
    return orphans


@shared_task(name="operators.load_builtin_suite")
def load_builtin_suite() -> int:
    return builtin_suite_load().entries.count()
