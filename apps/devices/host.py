"""How much of its cores the host gives right now: a probe for benchmarks on shared machines.

On a virtual machine another tenant can hold one of "our" cores for minutes at a time. Kernels
on one thread hardly notice; a kernel on two runs at half its speed, and every ratio of a
parallel kernel over a serial start (self-acceleration, the memory effect's pairs) drops with
it. A benchmark that probes the host as it goes can say when its figures were taken so.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

PROBE_SIZE = 384  # a float matrix product of about 1 ms on one core
PROBE_CALLS = 40


def parallel_speedup(threads: int | None = None, calls: int = PROBE_CALLS) -> float:
    """The median time of a float matrix product on one thread over its median time on
    `threads` (default: every core): close to `threads` on a quiet host, well under it while
    another tenant holds a core."""
    import torch

    threads = threads or os.cpu_count() or 1
    before = torch.get_num_threads()
    a, b = torch.rand(PROBE_SIZE, PROBE_SIZE), torch.rand(PROBE_SIZE, PROBE_SIZE)
    try:
        one = median_call_s(lambda: a @ b, threads=1, calls=calls)
        many = median_call_s(lambda: a @ b, threads=threads, calls=calls)
    finally:
        torch.set_num_threads(before)
    return one / many


def median_call_s(call: Callable[[], object], *, threads: int, calls: int) -> float:
    import torch

    torch.set_num_threads(threads)
    call()  # the first call allocates
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
