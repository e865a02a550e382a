"""The limits and environment a reference child runs under, fresh or forked from a warm runner
(apps/operators/warmrunner.py). Imports nothing of Django: refrun applies the limits in each
child it forks."""

from __future__ import annotations

import resource
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def clean_env(threads: int) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": str(threads),
        "HOME": "/nonexistent",
    }


def apply_limits(memory_mb: int, cpu_s: int) -> None:
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
    resource.setrlimit(
        resource.RLIMIT_FSIZE, (memory, memory)
    )  # no file beyond what fits in memory
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
