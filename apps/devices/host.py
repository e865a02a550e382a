"""How much of its cores the host gives right now: a probe for benchmarks on shared machines.

On a virtual machine another tenant can hold one of "our" cores for minutes at a time. Kernels
on one thread hardly notice; a kernel on two runs at half its speed, and every ratio of a
parallel kernel over a serial start (self-acceleration, the memory effect's pairs) drops with
it. A benchmark that probes the host as it goes can say when its figures were taken so.

The probe catches a core taken away, not a host that is slow on every core alike. On a virtual
machine the hypervisor's steal time says that: the share of CPU time our vCPUs were ready to
run but the host ran another guest. A benchmark reads it around each of its phases.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROBE_SIZE = 384  # a float matrix product of about 1 ms on one core
PROBE_CALLS = 40
PROC_STAT = Path("/proc/stat")


def parallel_speedup(threads: int | None = None, calls: int = PROBE_CALLS) -> float:
    """How many times faster a float matrix product ran on `threads` (default: every core)
    than on one: close to `threads` on a quiet host, well under it while another tenant holds
    a core. The two take turns, call by call, and the figure is the median of each turn's
    ratio, so a load that comes or goes midway slows both sides of a turn alike (timed one
    side after the other, one thread against one read 0.14 in a CI run)."""
    import torch

    threads = threads or os.cpu_count() or 1
    before = torch.get_num_threads()
    a, b = torch.rand(PROBE_SIZE, PROBE_SIZE), torch.rand(PROBE_SIZE, PROBE_SIZE)
    try:
        for count in (1, threads):  # the first call on each count allocates
            call_s(lambda: a @ b, threads=count)
        ratios = [call_s(lambda: a @ b, threads=1) / call_s(lambda: a @ b, threads=threads)
                  for _ in range(calls)]  # fmt: skip
    finally:
        torch.set_num_threads(before)
    return statistics.median(ratios)


def call_s(call: Callable[[], object], *, threads: int) -> float:
    """Seconds one call took on `threads` PyTorch threads."""
    import torch

    torch.set_num_threads(threads)
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


@dataclass(frozen=True)
class CpuTicks:
    steal: int
    total: int


def cpu_ticks(stat: str | None = None) -> CpuTicks | None:
    """Every CPU's time so far, in clock ticks, from the first line of /proc/stat ("cpu user
    nice system idle iowait irq softirq steal ..."); None where the host has no such file."""
    if stat is None:
        try:
            stat = PROC_STAT.read_text()
        except OSError:
            return None
    fields = stat.split("\n", 1)[0].split()
    if len(fields) < 9 or fields[0] != "cpu":
        raise ValueError(f"{PROC_STAT}: the first line is not the cpu totals: {fields[:3]}")
    ticks = [int(value) for value in fields[1:9]]  # guest time is counted in user already
    return CpuTicks(steal=ticks[7], total=sum(ticks))


def steal_share(before: CpuTicks | None, after: CpuTicks | None) -> float | None:
    """The share of CPU time between two readings that the hypervisor gave to another guest
    while ours was ready to run; None without both readings."""
    if before is None or after is None or after.total <= before.total:
        return None
    return (after.steal - before.steal) / (after.total - before.total)
