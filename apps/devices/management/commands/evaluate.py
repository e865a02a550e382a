from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, NoReturn

from django.conf import settings
from django.core.management.base import CommandError

from apps.accounts.models import Team
from apps.core.commands import DatabaseCommand, connection_after_ctrl_c
from apps.core.errors import DomainError
from apps.core.kernel_input import MAX_SOURCE_BYTES
from apps.devices.cpu_c.build import FlagsRejected, checked_flags
from apps.devices.evaluator import EVAL_BOUNDS, EvalSettings
from apps.devices.models import Evaluation
from apps.devices.services import (
    evaluation_execute,
    evaluation_fail,
    evaluation_request,
)
from apps.devices.verdicts import describe_verdict
from apps.operators.selectors import operator_get, version_get

MEASUREMENT_OPTIONS = {
    "seeds": "fresh input seeds per case",
    "warmup": "warm-up calls",
    "repeats": "timed calls",
    "threads": "threads",
}


class Command(DatabaseCommand):
    help = ("Evaluate a cpu-c kernel against an operator: compile, check, time; print the "
            "verdict (exit status 1 unless it is CORRECT).")  # fmt: skip

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("operator", help="operator slug (built-in or the team's)")
        parser.add_argument("kernel", help="the kernel's C source file")
        parser.add_argument("--team", help="look the operator up as this team sees it")
        parser.add_argument(
            "--operator-version", type=int, help="operator version (default: newest)"
        )
        parser.add_argument("--profile", action="store_true", help="add a cachegrind profile")
        parser.add_argument("--debug", action="store_true", help="add an ASan + UBSan run")
        parser.add_argument("--no-timing", action="store_true", help="check correctness only")
        parser.add_argument("--flags", default="", help="extra gcc flags from the allowlist, "
                            'space-separated (one alone: --flags=-O2)')  # fmt: skip
        for name, what in MEASUREMENT_OPTIONS.items():
            low, high = EVAL_BOUNDS[name]
            setting = f"KOPE_EVAL_{name.upper()}"
            parser.add_argument(f"--{name}", type=int, default=getattr(settings, setting),
                                help=f"{what}, {low}-{high} (default: {setting})")  # fmt: skip
        parser.add_argument("--rerun", action="store_true", help="ignore a stored verdict")
        parser.add_argument("--json", action="store_true", help="print the verdict as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        version = self.version(options)
        source = self.source(options["kernel"])
        flags = tuple(options["flags"].split())
        try:  # a bad option, not a rejected kernel: refused before anything is stored
            checked_flags(flags)
        except FlagsRejected as error:
            raise CommandError(f"--flags: {error}") from None
        eval_settings = EvalSettings(
            seeds=options["seeds"], warmup=options["warmup"], repeats=options["repeats"],
            threads=options["threads"], timing=not options["no_timing"],
            profile=options["profile"], debug=options["debug"],
            extra_flags=flags,
        )  # fmt: skip
        try:
            evaluation, _ = evaluation_request(
                version=version, source_text=source, options=eval_settings, rerun=options["rerun"]
            )
        except DomainError as error:
            raise CommandError(error.message) from None
        try:
            evaluation = evaluation_execute(
                evaluation.pk, max_attempts=settings.KOPE_EVAL_MAX_ATTEMPTS, worker=runner_name()
            )
        except KeyboardInterrupt:
            stopped(evaluation.pk)
        if evaluation.status == evaluation.Status.FAILED:
            raise CommandError(f"the evaluation failed: {evaluation.error}")
        assert evaluation.verdict is not None
        if options["json"]:
            self.stdout.write(
                json.dumps({"evaluation": evaluation.pk, **evaluation.verdict}, indent=2)
            )
        else:
            self.stdout.write(
                f"evaluation {evaluation.pk} of {version.operator.slug} v{version.number}"
            )
            self.stdout.write(describe_verdict(evaluation.verdict))
        status = evaluation.verdict["status"].upper()
        if status != "CORRECT":  # after the verdict: `evaluate ... && deploy` stops here
            raise CommandError(f"verdict {status}: exit status 1")

    def version(self, options: dict[str, Any]) -> Any:
        team = None
        if options["team"]:
            team = Team.objects.filter(slug=options["team"]).first()
            if team is None:
                raise CommandError(f"no team {options['team']!r}")
        try:
            return version_get(operator_get(team, options["operator"]), options["operator_version"])
        except DomainError as error:
            raise CommandError(error.message) from None

    def source(self, path: str) -> str:
        try:
            with Path(path).open("rb") as file:
                raw = file.read(MAX_SOURCE_BYTES + 1)  # /dev/zero never ends
            if len(raw) > MAX_SOURCE_BYTES:
                raise CommandError(f"{path} is over the kernel limit of {MAX_SOURCE_BYTES} bytes")
            if not raw.strip():  # a wrong path or a truncated file, not a kernel to judge
                raise CommandError(f"{path} is empty: no kernel to evaluate")
            return raw.decode()
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"cannot read {path}: {error}") from None


def runner_name() -> str:
    """The evaluation's `worker` while this command runs it, as a worker names itself."""
    return f"evaluate@{socket.gethostname()} (pid {os.getpid()})"


def stopped(evaluation_id: int) -> NoReturn:
    """Ctrl-C: the evaluation ends failed, so the next `evaluate` starts it over. Left running,
    an agent worker that starts later took it for a dead worker's and ran it, and each Ctrl-C
    used up an attempt until one `evaluate` gave up at once, blaming a killed worker."""
    connection_after_ctrl_c()
    evaluation_fail(Evaluation.objects.get(pk=evaluation_id), "stopped by Ctrl-C")
    raise CommandError(f"evaluation {evaluation_id} stopped by Ctrl-C; nothing was judged")
