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
        try:
            suite = builtin_suite_load(on_operator=self.report)
        except (SpecError, ImportProblem) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"Suite {suite.slug}: {suite.entries.count()} operators.")

    def report(self, version: OperatorVersion, created: bool) -> None:
        state = "stored" if created else "unchanged"
        self.stdout.write(f"{state:9} {version.operator.slug} v{version.number}")
