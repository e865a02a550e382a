from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from apps.benchmarks.evaluator import BENCHMARKS, Benchmark, BenchmarkError, BenchOptions
from apps.benchmarks.kernels import default_out_dir, kernels_benchmark_for
from apps.benchmarks.reference import REFERENCE_BENCHMARK
from apps.benchmarks.retrieval import DEFAULT_CASES, retrieval_benchmark_for
from apps.benchmarks.sessions import KernelsOptions
from apps.benchmarks.suite import SuiteOptions, suite_benchmark_for
from apps.benchmarks.web import WEB_BENCHMARK
from apps.core.commands import require_a_migrated_database, unwritable_folder
from apps.devices.evaluator import EVAL_BOUNDS


class Command(BaseCommand):
    help = "Measure a part of the system (not a test: the numbers are for reading)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "name",
            choices=sorted([*BENCHMARKS, "retrieval", "kernels", "suite", "web", "reference"]),
            help="what to measure",
        )
        parser.add_argument(
            "path", nargs="?", default="", help="suite: the folder of a KernelBench or "
            "NPUKernelBench checkout (or one level of it) to import and optimize",
        )  # fmt: skip
        parser.add_argument(
            "--format", default=None, choices=["kernelbench", "npukernelbench"],
            help="suite: the folder's layout (detected when left out)",
        )  # fmt: skip
        parser.add_argument(
            "--scale", type=float, default=1.0, help="suite: KernelBench size factor (0 to 1]"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--repeats",
            type=int,
            default=10,
            help="evaluations behind the spread; reference: turns per operator (at least 2)",
        )
        parser.add_argument(
            "--cases", type=int, default=DEFAULT_CASES, help="synthetic cases (retrieval)"
        )
        parser.add_argument(
            "--operators",
            default=None,
            help="kernels: comma list of built-in operators (all); suite: of imported operators "
            "or problems (all)",
        )
        parser.add_argument("--rounds", type=int, default=30, help="kernels: rounds per operator")
        parser.add_argument(
            "--timed-calls", type=int, default=30, help="kernels: timed calls per evaluation"
        )
        parser.add_argument("--out", default="", help="kernels: folder for the Markdown and CSV")
        parser.add_argument(
            "--team", default="", help="kernels: run in this team (slug), with what it knows"
        )
        # One candidate only: for the test that the command works, not for measuring.
        parser.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        problem = option_problem(options)
        if problem:
            raise CommandError(problem)
        if options["name"] in USES_THE_DATABASE:
            require_a_migrated_database()
        benchmark = all_benchmarks(options)[options["name"]]
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


def option_problem(options: dict[str, Any]) -> str | None:
    most_calls = EVAL_BOUNDS["repeats"][1]
    if options["repeats"] < 2:
        return "--repeats must be at least 2: the spread compares evaluations"
    if options["rounds"] < 1:
        return "--rounds must be at least 1"
    if not 3 <= options["timed_calls"] <= most_calls:
        return f"--timed-calls must be from 3 to {most_calls}"
    if options["cases"] < 1:
        return "--cases must be at least 1"
    if options["operators"] is not None and not operator_slugs(options["operators"]):
        return "--operators names no operator"  # left out, it means all of them
    if options["name"] == "suite" and not options["path"]:
        return "bench suite needs the folder to import: bench suite PATH"
    if options["path"] and options["name"] != "suite":
        return f"bench {options['name']} takes no folder (only bench suite does)"
    if options["name"] == "kernels":
        return unwritable_folder("--out", Path(options["out"]) if options["out"]
                                 else default_out_dir())  # fmt: skip
    return None


def suite_options(options: dict[str, Any]) -> SuiteOptions:
    chosen = operator_slugs(options["operators"]) if options["operators"] else None
    return SuiteOptions(path=options["path"], fmt=options["format"], scale=options["scale"],
                        operators=chosen, rounds=options["rounds"],
                        repeats=options["timed_calls"])  # fmt: skip


def operator_slugs(names: str) -> list[str]:
    return [name.strip() for name in names.split(",") if name.strip()]


# The web benchmark makes and migrates a database of its own; the evaluator's reads the
# built-in operators, as the others do.
USES_THE_DATABASE = ("kernels", "suite", "retrieval", "reference", "evaluator")


def all_benchmarks(options: dict[str, Any]) -> dict[str, Benchmark]:
    kernels = KernelsOptions(
        operators=operator_slugs(options["operators"]) if options["operators"] else None,
        rounds=options["rounds"],
        repeats=options["timed_calls"],
        out_dir=Path(options["out"]) if options["out"] else None,
        team=options["team"] or None,
    )
    return BENCHMARKS | {
        "retrieval": retrieval_benchmark_for(options["cases"]),
        "kernels": kernels_benchmark_for(kernels),
        "suite": suite_benchmark_for(suite_options(options)),
        "web": WEB_BENCHMARK,
        "reference": REFERENCE_BENCHMARK,
    }
