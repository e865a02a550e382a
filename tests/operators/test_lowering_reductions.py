"""Lowering reductions over dims (with and without keepdim) and cumulative ops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.operators.lowering_support import check_lowering


class Reductions(nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [
            x.sum(), x.sum(dim=1, keepdim=True), x.sum(dim=(0, 2)), x.mean(dim=-1),
            x.mean(), x.amax(dim=1), x.amin(dim=(1, 2), keepdim=True), x.max(dim=2).values,
            x.max(dim=1).indices, x.min(dim=0).values, x.argmax(dim=2), x.argmin(dim=1),
            x.argmax(), x.max(), torch.prod(x, dim=2), x.var(dim=1), x.std(dim=2, keepdim=True),
            x.var(dim=(1, 2), unbiased=False), (x > 0).any(dim=1), (x > -3).all(dim=2),
            torch.norm(x, dim=2), torch.logsumexp(x, dim=1), x.abs().sum(dim=-1),
        ]  # fmt: skip


class Cumulative(nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.cumsum(x, dim=1), torch.cumprod(x * 0.5 + 1, dim=2), x.cumsum(0)]


def cube(a: int, b: int, c: int) -> list[Any]:
    return [torch.randn(a, b, c)]


@pytest.mark.parametrize("model", [Reductions(), Cumulative()], ids=["reductions", "cumulative"])
def test_reductions(model: nn.Module, tmp_path: Path) -> None:
    check_lowering(model, cube, [{"a": 2, "b": 6, "c": 8}, {"a": 3, "b": 5, "c": 3}], tmp_path)


class ArgmaxOverDim(nn.Module):
    """KernelBench 51_Argmax_over_a_dimension, smaller."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


def test_argmax_problem(tmp_path: Path) -> None:
    check_lowering(ArgmaxOverDim(1), cube, [{"a": 4, "b": 9, "c": 6}, {"a": 2, "b": 3, "c": 5}],
                   tmp_path)  # fmt: skip
