"""The GPU check: the triton target's device-worker path on a small suite, on this host's GPU.

Each operator's Triton starting kernel is evaluated as a device worker evaluates it (the
target's evaluate function: fresh seeds, confined candidate process, CUDA-event timing
against PyTorch eager), several times over, and the verdicts, speedups and the spread of the
timings are printed and written to docs/gpu/<date>-<gpu>.md.
"""

from __future__ import annotations

import re
import statistics
import time
from datetime import date
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.core.commands import unwritable_folder
from apps.devices.evaluator import EvalSettings, EvaluationError
from apps.devices.gpu.device import cuda_device, no_device_reason, triton_version
from apps.devices.gpu.suite import builtin_folder, folder_under_test
from apps.devices.targets import target_get
from apps.operators.builtin_suite import OperatorFolder
from apps.operators.spec import SpecError

SMALL_SUITE = ("vector_add", "relu", "row_sum", "transpose_2d", "cumsum")
REPORT_DIR = Path(settings.BASE_DIR) / "docs" / "gpu"


class Command(BaseCommand):
    help = ("Evaluate Triton starting kernels on this host's CUDA GPU; print and save a report "
            "(exit status 1 unless every verdict is correct).")  # fmt: skip

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--operators", default=",".join(SMALL_SUITE),
                            help="comma-separated built-in operator slugs")  # fmt: skip
        parser.add_argument(
            "--repeats",
            type=int,
            default=3,
            help="evaluations per operator, for the spread of the timings",
        )
        parser.add_argument(
            "--output-dir",
            default=str(REPORT_DIR),
            help="where the report goes (default: docs/gpu)",
        )
        parser.add_argument("--allow-interpreter", action="store_true",
                            help="without a GPU, run the correctness path in Triton's "
                            "interpreter instead of stopping (nothing is timed)")  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        device = cuda_device()
        if device is None and not options["allow_interpreter"]:
            raise CommandError(
                f"no CUDA device: {no_device_reason()}. This check times Triton kernels on a "
                "CUDA GPU; run it on a CUDA host (--allow-interpreter dry-runs the "
                "correctness path in Triton's interpreter instead)."
            )
        # Before the run, which takes minutes, not after it.
        folders = triton_folders(options["operators"])
        if options["repeats"] < 1:
            raise CommandError(f"--repeats {options['repeats']}: must be at least 1")
        out_dir = Path(options["output_dir"])
        if problem := unwritable_folder("--output-dir", out_dir):
            raise CommandError(problem)
        where = device.name if device else "no GPU (Triton interpreter, correctness only)"
        header = [
            f"# GPU check, {date.today().isoformat()}, {where}",
            "",
            f"triton {triton_version()}; "
            + (
                f"CUDA {device.cuda}, {device.memory_gb:.0f} "
                f"GiB, compute capability {device.capability}"
                if device
                else "CPU"
            ),
            "",
            "Command: `python manage.py gpu_check "
            f"--operators {options['operators']} --repeats {options['repeats']}`",
            "",
        ]
        self.stdout.write("\n".join(header))
        rows = [self.check_operator(folder, options["repeats"]) for folder in folders]
        lines = header + table(rows)
        path = out_dir / f"{date.today().isoformat()}-{slug_of(where)}.md"
        path.write_text("\n".join(lines) + "\n")
        self.stdout.write("\n".join(table(rows)))
        self.stdout.write(f"\nwritten to {path}")
        wrong = [row["slug"] for row in rows if row["status"] != "correct"]
        if wrong:  # after the report, which is written either way
            raise CommandError(f"not correct on every run: {', '.join(wrong)}: exit status 1")

    def check_operator(self, folder: OperatorFolder, repeats: int) -> dict[str, Any]:
        operator = folder_under_test(folder)
        options = EvalSettings.from_settings(seeds=1)
        verdicts, started = [], time.monotonic()
        for _ in range(repeats):
            try:
                verdicts.append(target_get("triton").evaluate(operator, folder.triton_source,
                                                               options))  # fmt: skip
            except EvaluationError as error:
                verdicts.append({"status": "failed", "reason": str(error), "timed": None,
                                 "flags": []})  # fmt: skip
        row = summarise(folder.spec.slug, verdicts)
        row["seconds"] = time.monotonic() - started
        self.stdout.write(row_line(row))
        return row


def triton_folders(operators: str) -> list[OperatorFolder]:
    slugs = [slug.strip() for slug in operators.split(",") if slug.strip()]
    if not slugs:
        raise CommandError("--operators names no operator")
    folders = []
    for slug in slugs:
        try:
            folder = builtin_folder(slug)
        except KeyError:
            raise CommandError(f"--operators: no built-in operator {slug!r}") from None
        except SpecError as error:  # a folder being edited: what is wrong, not a traceback
            raise CommandError(str(error)) from None
        if not folder.triton_source:
            raise CommandError(f"--operators: {slug} has no Triton starting kernel "
                               "(naive_triton.py)")  # fmt: skip
        folders.append(folder)
    return folders


def summarise(slug: str, verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    timed = [v["timed"] for v in verdicts if (v.get("timed") or {}).get("candidate")]
    statuses = sorted({v["status"] for v in verdicts})
    row: dict[str, Any] = {
        "slug": slug,
        "status": "/".join(statuses),
        "runs": len(verdicts),
        "reason": next((v["reason"] for v in verdicts if v.get("reason")), ""),
        "flags": sorted({f for v in verdicts for f in v.get("flags", [])}),
    }
    if timed:
        speedups = [t["speedup"] for t in timed]
        medians = [t["candidate"]["median_ms"] for t in timed]
        row.update({
            "speedup": statistics.median(speedups),
            "speedup_range": (min(speedups), max(speedups)),
            "candidate_ms": statistics.median(medians),
            "candidate_range": (min(medians), max(medians)),
            "reference_ms": statistics.median(t["reference"]["median_ms"] for t in timed),
            "within_spread": statistics.median(spread(t["candidate_samples_ms"]) for t in timed),
        })  # fmt: skip
    return row


def spread(samples: list[float]) -> float:
    """(p90 - p10) / median of one evaluation's timed calls."""
    ordered = sorted(samples)
    p10, p90 = ordered[len(ordered) // 10], ordered[(len(ordered) * 9) // 10 - 1]
    return (p90 - p10) / max(statistics.median(ordered), 1e-12)


def row_line(row: dict[str, Any]) -> str:
    if "speedup" not in row:
        return f"{row['slug']}: {row['status']} x{row['runs']} {row['reason'][:200]}"
    return (f"{row['slug']}: {row['status']} x{row['runs']}, speedup {row['speedup']:.2f}x "
            f"({row['speedup_range'][0]:.2f}-{row['speedup_range'][1]:.2f}), candidate "
            f"{row['candidate_ms']:.4f} ms ({row['candidate_range'][0]:.4f}-"
            f"{row['candidate_range'][1]:.4f}), eager {row['reference_ms']:.4f} ms, "
            f"p10-p90 spread {row['within_spread']:.1%}")  # fmt: skip


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| operator | verdicts | speedup vs eager (median, min-max) | candidate ms "
             "(median, min-max over evaluations) | eager ms | p10-p90 spread within one "
             "evaluation | flags |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in rows:
        if "speedup" in row:
            lo, hi = row["speedup_range"]
            clo, chi = row["candidate_range"]
            lines.append(f"| {row['slug']} | {row['status']} x{row['runs']} | "
                         f"{row['speedup']:.2f}x ({lo:.2f}-{hi:.2f}) | {row['candidate_ms']:.4f} "
                         f"({clo:.4f}-{chi:.4f}) | {row['reference_ms']:.4f} | "
                         f"{row['within_spread']:.1%} | {'; '.join(row['flags'])} |")  # fmt: skip
        else:
            lines.append(f"| {row['slug']} | {row['status']} x{row['runs']} | - | - | - | - | "
                         f"{row['reason'][:200]} |")  # fmt: skip
    return lines


def slug_of(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]
