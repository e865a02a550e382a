from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from apps.devices.bench import BENCHMARKS, Benchmark, BenchmarkError, BenchOptions
from apps.memory.bench import DEFAULT_CASES, retrieval_benchmark_for


class Command(BaseCommand):
    help = "Measure a part of the system (not a test: the numbers are for reading)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "name", choices=sorted([*BENCHMARKS, "retrieval"]), help="what to measure"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--repeats", type=int, default=10, help="evaluations behind the spread (at least 2)"
        )
        parser.add_argument(
            "--cases", type=int, default=DEFAULT_CASES, help="synthetic cases (retrieval)"
        )
        # One candidate only: for the test that the command works, not for measuring.
        parser.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["repeats"] < 2:
            raise CommandError("--repeats must be at least 2: the spread compares evaluations")
        benchmark = all_benchmarks(options["cases"])[options["name"]]
        bench_options = BenchOptions(
            repeats=options["repeats"], quick=options["quick"], progress=self.progress
        )
        try:
            report = benchmark.run(bench_options)
        except BenchmarkError as error:
            raise CommandError(str(error)) from None
        if options["json"]:
            self.stdout.write(json.dumps(report))
        else:
            self.stdout.write(benchmark.render(report))

    def progress(self, line: str) -> None:
        self.stderr.write(f"bench: {line}…")


def all_benchmarks(cases: int) -> dict[str, Benchmark]:
    return BENCHMARKS | {"retrieval": retrieval_benchmark_for(cases)}
