from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from apps.core.commands import DatabaseCommand
from apps.memory.journal import forest_rebuild, journal_exists


class Command(DatabaseCommand):
    help = "Make every Case again from the journal (the journal is the record; Cases are views)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--session", type=int, help="only this session's cases")

    def handle(self, *args: Any, session: int | None, **options: Any) -> None:
        if session is not None and not journal_exists(session):
            raise CommandError(f"--session {session}: no session has that id")
        count = forest_rebuild(session_id=session)
        self.stdout.write(f"Rebuilt {count} cases from the journal.")
