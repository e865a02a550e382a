from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from apps.core.commands import DatabaseCommand
from apps.operators.models import OperatorVersion
from apps.operators.services import ImportProblem, builtin_suite_load
from apps.operators.spec import SpecError


class Command(DatabaseCommand):
    help = "Store the built-in CPU suite (apps/operators/builtin/); unchanged operators are kept."

    def handle(self, *args: Any, **options: Any) -> None:
        lines: list[str] = []

        def report(version: OperatorVersion, created: bool) -> None:
            state = "stored" if created else "unchanged"
            lines.append(f"{state:9} {version.operator.slug} v{version.number}")

        try:  # one operator that fails stores none of them: lines only once all are stored
            suite = builtin_suite_load(on_operator=report)
        except (SpecError, ImportProblem) as error:
            raise CommandError(f"{error} (nothing was stored)") from None
        self.stdout.write(
            "\n".join([*lines, f"Suite {suite.slug}: {suite.entries.count()} operators."])
        )
