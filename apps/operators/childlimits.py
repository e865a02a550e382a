"""The limits a reference child runs under. Imports nothing of Django: the warm runner
(apps/operators/refrun.py) applies them in each child it forks."""

from __future__ import annotations

import resource


def apply_limits(memory_mb: int, cpu_s: int) -> None:
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
    resource.setrlimit(
        resource.RLIMIT_FSIZE, (memory, memory)
    )  # no file beyond what fits in memory
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
