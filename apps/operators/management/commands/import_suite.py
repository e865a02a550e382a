from __future__ import annotations

import sys
from typing import Any, NoReturn

from django.core.management.base import CommandError
from django.utils import timezone
from tqdm import tqdm

from apps.accounts.models import Team
from apps.core.commands import DatabaseCommand, connection_after_ctrl_c
from apps.core.errors import DomainError
from apps.operators.importing import (
    FAILED,
    FORMATS,
    ReportLine,
    import_execute,
    import_start,
    summary,
)
from apps.operators.models import ImportRun


class Command(DatabaseCommand):
    help = ("Import a KernelBench or NPUKernelBench checkout (or a folder inside one); exit "
            "status 1 when a problem failed.")  # fmt: skip

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("path", help="the folder to import")
        parser.add_argument("--format", choices=FORMATS, help="default: detected from the layout")
        parser.add_argument(
            "--scale", type=float, default=1.0,
            help="multiply every KernelBench size constant (9 and up) by this (0 < F <= 1)",
        )  # fmt: skip
        parser.add_argument("--team", help="the team that owns the operators (default: shared)")

    def handle(self, *args: Any, path: str, format: str | None, scale: float, team: str | None,
               **options: Any) -> None:  # fmt: skip
        owner = self.team(team)
        try:
            run = import_start(path=path, fmt=format, scale=scale, team=owner, user=None,
                               restrict=False)  # fmt: skip
        except DomainError as error:
            raise CommandError(error.message) from None
        self.stdout.write(f"Importing {run.path} as {run.format} (scale {run.scale:g})")
        with tqdm(unit="op", file=sys.stderr, disable=None) as bar:  # no bar when not a terminal

            def progress(current: ImportRun, line: ReportLine) -> None:
                bar.total = current.total
                bar.set_postfix_str(line.problem[-40:])
                bar.update(1)

            try:
                run = import_execute(run, on_progress=progress)
            except KeyboardInterrupt:
                stopped(run)
        self.print_report(run)

    def team(self, slug: str | None) -> Team | None:
        if slug is None:
            return None
        found = Team.objects.filter(slug=slug).first()
        if found is None:
            raise CommandError(
                f"no team {slug!r} (teams: {', '.join(t.slug for t in Team.objects.all())})"
            )
        return found

    def print_report(self, run: ImportRun) -> None:
        if run.error:
            raise CommandError(run.error)
        for line in run.report:
            detail = f" v{line['version']}" if line["version"] else ""
            reason = f": {line['reason']}" if line["reason"] else ""
            name = (
                f"{line['operator']}{detail} ({line['problem']})"
                if line["operator"]
                else line["problem"]
            )
            self.stdout.write(f"{line['outcome']:9} {name}{reason}")
        counts = summary(run)
        self.stdout.write(", ".join(f"{n} {outcome}" for outcome, n in counts.items()))
        if counts[FAILED]:  # after the report; skipped and unchanged problems are no failure
            raise CommandError(f"{counts[FAILED]} problem(s) failed: exit status 1")


def stopped(run: ImportRun) -> NoReturn:
    """Ctrl-C: the run ends failed, saying where, rather than "running" with no process on it
    (a traceback, and an agent worker that starts later taking up the import it stopped)."""
    connection_after_ctrl_c()
    run.refresh_from_db()  # a problem is stored in one transaction: none is half-stored
    reason = (f"stopped by Ctrl-C after {run.done} of {run.total} problems (those are kept); "
              "import the folder again to go on")  # fmt: skip
    ImportRun.objects.filter(pk=run.pk, status=ImportRun.Status.RUNNING).update(
        status=ImportRun.Status.FAILED, error=reason, finished_at=timezone.now()
    )
    raise CommandError(reason) from None
