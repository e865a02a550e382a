"""The host probes: how much faster a matrix product runs on every core than on one, and how
much CPU time the hypervisor gave to other guests."""

from __future__ import annotations

import pytest
import torch

from apps.devices.host import CpuTicks, cpu_ticks, parallel_speedup, steal_share

# /proc/stat's first line from a guest: user nice system idle iowait irq softirq steal guest
# guest_nice, then the per-CPU lines
STAT = """cpu  4705 150 1120 16250 520 0 25 3230 0 0
cpu0 2400 70 560 8100 260 0 12 1600 0 0
"""


def test_one_thread_against_one_thread_is_even_and_the_thread_count_is_restored() -> None:
    """Both sides time the same product the same way: a ratio near 1, whatever the load; and
    the process's PyTorch threads are as they were (the probe runs on one here)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert 0.5 < parallel_speedup(threads=1) < 2.0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_cpu_totals_are_read_from_the_first_line_with_steal_as_the_eighth_field() -> None:
    assert cpu_ticks(STAT) == CpuTicks(
        steal=3230, total=4705 + 150 + 1120 + 16250 + 520 + 25 + 3230
    )


def test_a_stat_file_without_cpu_totals_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="/proc/stat: the first line is not the cpu totals"):
        cpu_ticks("intr 12 0 0\n")


def test_the_steal_share_is_the_stolen_part_of_the_time_between_two_readings() -> None:
    before = CpuTicks(steal=100, total=1000)
    assert steal_share(before, CpuTicks(steal=150, total=1200)) == 0.25
    assert steal_share(before, before) is None, "no time passed: no share"
    assert steal_share(None, before) is None


def test_this_host_reports_a_share_between_nothing_and_everything() -> None:
    before = cpu_ticks()
    sum(i * i for i in range(2_000_000))
    share = steal_share(before, cpu_ticks())
    assert share is not None and 0.0 <= share <= 1.0
