from __future__ import annotations

import shutil
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from apps.devices.cpu_c.build import CompileError
from apps.devices.cpu_c.check import check_kernel
from apps.operators.builtin_suite import read_builtin_suite
from apps.operators.sandbox import ReferenceRunError
from apps.operators.spec import SpecError

MAX_SEED = 2**64 - 1  # the most torch.Generator.manual_seed takes


class Command(BaseCommand):
    help = "Compile each built-in operator's naive C kernel and compare it with the reference."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("slugs", nargs="*", help="operators to check (default: all)")
        parser.add_argument("--seed", type=int, default=1,
                            help=f"input seed, 0-{MAX_SEED} (default: 1)")  # fmt: skip

    def handle(self, *args: Any, slugs: list[str], seed: int, **options: Any) -> None:
        if shutil.which("gcc") is None:  # else a FileNotFoundError traceback from the first
            raise CommandError("no gcc on PATH: check_kernels compiles each kernel with it")
        if not 0 <= seed <= MAX_SEED:  # else every case failed as if the kernel were wrong
            raise CommandError(f"--seed {seed}: must be from 0 to {MAX_SEED}")
        try:
            suite = read_builtin_suite()
        except SpecError as error:  # a folder being edited: what is wrong, not a traceback
            raise CommandError(str(error)) from None
        folders = [f for f in suite if not slugs or f.spec.slug in slugs]
        if slugs and len(folders) != len(set(slugs)):
            found = {f.spec.slug for f in folders}
            raise CommandError(f"no built-in operator {', '.join(sorted(set(slugs) - found))}")
        failures = sum(self.check_one(folder, seed) for folder in folders)
        if failures:
            raise CommandError(f"{failures} operator(s) failed")

    def check_one(self, folder: Any, seed: int) -> bool:
        slug = folder.spec.slug
        try:
            results = check_kernel(
                folder.spec, folder.reference_source, folder.naive_source, seed=seed
            )
        except CompileError as error:
            self.stdout.write(f"FAIL {slug}: does not compile\n{error.output}")
            return True
        except ReferenceRunError as error:
            self.stdout.write(f"FAIL {slug}: {error}")
            return True
        for result in results:
            mark = "ok  " if result.passed else "FAIL"
            self.stdout.write(f"{mark} {slug}/{result.case_id}: {result.detail}")
        return not all(r.passed for r in results)
