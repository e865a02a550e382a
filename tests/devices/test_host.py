"""The host probe: how much faster a matrix product runs on every core than on one."""

from __future__ import annotations

import torch

from apps.devices.host import parallel_speedup


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
