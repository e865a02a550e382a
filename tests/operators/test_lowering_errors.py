"""What the lowering refuses, and what the kernel refuses at run time: never wrong silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from apps.operators.lowering import LoweringError, lower_module
from apps.operators.refrun import run_kernel
from tests.operators.lowering_support import compile_kernel


class GridSample(nn.Module):
    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(x, grid, align_corners=False)


def test_an_unlowered_op_is_named() -> None:
    inputs = [torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1]
    with pytest.raises(LoweringError, match=r"aten\.grid_sampler_2d\.default: not lowered"):
        lower_module(GridSample().eval(), inputs)


class Sort(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=1).values


def test_sort_is_not_lowered() -> None:
    with pytest.raises(LoweringError, match=r"aten\.sort\.\w+: not lowered"):
        lower_module(Sort().eval(), [torch.randn(3, 5)])


def test_too_many_parameters_to_embed() -> None:
    model = nn.Linear(512, 512).eval()
    with pytest.raises(LoweringError, match="too large"):
        lower_module(model, [torch.randn(2, 512)])


def test_a_dtype_the_abi_lacks() -> None:
    with pytest.raises(LoweringError, match="float16"):
        lower_module(nn.ReLU().eval(), [torch.randn(2, 3).half()])


class DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.sum() > 0 else x - 1


def test_a_model_export_cannot_trace() -> None:
    with pytest.raises(LoweringError, match=r"torch\.export"):
        lower_module(DataDependent().eval(), [torch.randn(3)])


class FixedWidth(nn.Module):
    """split into fixed chunks of 2: torch.export specializes the width to the example's."""

    def forward(self, x: torch.Tensor, scale: float) -> list[torch.Tensor]:
        return [part * scale for part in x.split(2, dim=1)]


def call(
    kernel: Any, inputs: list[torch.Tensor], outputs: list[torch.Tensor], attrs: list[float]
) -> int:
    try:
        run_kernel(kernel, inputs, outputs, attrs)
    except RuntimeError as error:
        return int(str(error).rsplit(" ", 1)[-1])
    return 0


def test_the_kernel_refuses_sizes_and_scalars_it_was_not_built_for(tmp_path: Path) -> None:
    model = FixedWidth().eval()
    kernel = compile_kernel(lower_module(model, [torch.randn(3, 4), 0.5]), tmp_path)
    good = [torch.randn(5, 4)]
    expected = [t.contiguous() for t in model(good[0], 0.5)]
    assert call(kernel, good, expected, [0.5]) == 0
    assert call(kernel, [torch.randn(5, 6)], [torch.empty(5, 2)] * 3, [0.5]) == 2
    assert call(kernel, good, expected, [0.25]) == 3
    assert call(kernel, [torch.randn(5, 4).double()], expected, [0.5]) == 2
