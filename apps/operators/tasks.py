"""Operator work that runs in a worker: imports and loading the built-in suite."""

from __future__ import annotations

from celery import shared_task

from apps.operators.importing import import_execute
from apps.operators.models import ImportRun
from apps.operators.services import builtin_suite_load


@shared_task(name="operators.import_folder")
def import_folder(import_run_id: int) -> str:
    run = ImportRun.objects.get(pk=import_run_id)
    if run.status != ImportRun.Status.RUNNING or run.done:
        return run.status  # a redelivered task does not import twice
    return import_execute(run).status


@shared_task(name="operators.load_builtin_suite")
def load_builtin_suite() -> int:
    return builtin_suite_load().entries.count()
