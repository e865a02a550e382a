"""Lowering softmax/log_softmax and normalization layers (eval mode)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tests.operators.lowering_support import check_lowering


class Softmaxes(nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.softmax(x, dim=-1), torch.log_softmax(x, dim=1), torch.softmax(x, 0),
                nn.functional.normalize(x, dim=2)]  # fmt: skip


def test_softmax(tmp_path: Path) -> None:
    def make(a: int, b: int, c: int) -> list[Any]:
        return [torch.randn(a, b, c) * 3]

    check_lowering(Softmaxes(), make, [{"a": 2, "b": 5, "c": 16}, {"a": 3, "b": 3, "c": 7}],
                   tmp_path)  # fmt: skip


class Norms(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.batch = nn.BatchNorm2d(4)
        self.group = nn.GroupNorm(2, 4)
        self.instance = nn.InstanceNorm2d(4, affine=True)
        self.layer = nn.LayerNorm(6)
        self.rms = nn.RMSNorm(6)
        with torch.no_grad():  # running statistics that are not the identity
            self.batch.running_mean.uniform_(-1, 1)
            self.batch.running_var.uniform_(0.5, 2)
            for module in (self.batch, self.group, self.instance, self.layer, self.rms):
                module.weight.uniform_(0.5, 1.5)
            for module in (self.batch, self.group, self.instance, self.layer):
                module.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [self.batch(x), self.group(x), self.instance(x), self.layer(x), self.rms(x),
                nn.functional.layer_norm(x, x.shape[-2:])]  # fmt: skip


def test_norms(tmp_path: Path) -> None:
    def make(n: int, h: int) -> list[Any]:
        return [torch.randn(n, 4, h, 6) * 2 + 1]

    torch.manual_seed(0)
    check_lowering(Norms(), make, [{"n": 2, "h": 5}, {"n": 3, "h": 3}], tmp_path)
