from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from apps.accounts.models import Team
from apps.core.commands import DatabaseCommand
from apps.operators.selectors import (
    latest_versions,
    operators_listed_for,
    operators_visible_to,
)
from apps.operators.spec import FAMILIES


class Command(DatabaseCommand):
    help = "List operators (newest versions): slug, version, family, level, cases, name."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--team", help="also show this team's own operators (in place "
                            "of a shared one of the same slug)")  # fmt: skip
        parser.add_argument("--family", choices=FAMILIES, help="only this family")
        parser.add_argument("--level", type=int, choices=[1, 2, 3], help="only this level")

    def handle(self, *args: Any, team: str | None, family: str | None, level: int | None,
               **options: Any) -> None:  # fmt: skip
        owner = Team.objects.filter(slug=team).first() if team else None
        if team and owner is None:
            raise CommandError(f"no team {team!r}")
        # The team's own operator of a shared one's slug is the one it sees: one row a slug.
        operators = operators_listed_for(owner) if owner else operators_visible_to(None)
        versions = latest_versions(operators, family=family, level=level)
        self.stdout.write(f"{'operator':34} {'ver':>3} {'family':14} {'lvl':>3} {'cases':>5}  name")
        for version in versions:
            self.stdout.write(
                f"{version.operator.slug:34} {version.number:>3} {version.operator.family:14} "
                f"{version.level:>3} {getattr(version, 'case_count', 0):>5}  {version.name}"
            )
        self.stdout.write(f"{len(versions)} operators")
