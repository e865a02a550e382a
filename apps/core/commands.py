"""What the project's own management commands share."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def require_a_migrated_database() -> None:
    """Stop with what to do, not a traceback from deep inside the command, on a database that
    `manage.py migrate` has not brought up to date (a fresh KOPE_DATA_DIR, say)."""
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan[:3])
        more = f" and {len(plan) - 3} more" if len(plan) > 3 else ""
        raise CommandError(
            f"the database {connection.settings_dict['NAME']} lacks {len(plan)} migrations "
            f"({names}{more}): run manage.py migrate first (make run does)"
        )


def unwritable_folder(option: str, folder: Path) -> str | None:
    """Why the folder an option names cannot take what a command writes there (made if
    missing), or None: checked before a run of many minutes, not when its results are due."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        reason = error.strerror
    else:
        if os.access(folder, os.W_OK):
            return None
        reason = "permission denied"
    return f"{option} {folder}: not a folder it can write to: {reason}"


class DatabaseCommand(BaseCommand):
    """A command that reads or writes the project's tables: it checks they are there first."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        require_a_migrated_database()
        return super().execute(*args, **options)


def connection_after_ctrl_c() -> None:
    """Drop the database connection a Ctrl-C may have caught mid-query: psycopg, interrupted
    while sending, leaves it "another command is already in progress" and every later query on
    it fails, so the command's own "stopped" update never landed. The next query opens a new
    one."""
    connection.close()
