"""Lowering convolutions (1d/2d/3d, strided, padded, dilated, grouped, transposed) and pools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.operators.lowering_support import check_lowering


class Conv2dStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, stride=2, padding=1)
        self.grouped = nn.Conv2d(6, 4, (3, 2), padding=(2, 1), dilation=(2, 1), groups=2)
        self.up = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        y = torch.relu(self.conv(x))
        z = self.grouped(y)
        return [y, z, self.up(z)]


class Conv1d3d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(2, 3, 3, stride=2, bias=False)
        self.t1 = nn.ConvTranspose1d(3, 2, 4, stride=3, groups=1)
        self.c3 = nn.Conv3d(2, 2, (2, 3, 3), padding=1, groups=2)
        self.t3 = nn.ConvTranspose3d(2, 4, 2, stride=2, groups=2)

    def forward(self, x: torch.Tensor, v: torch.Tensor) -> list[torch.Tensor]:
        return [self.t1(self.c1(x)), self.t3(self.c3(v))]


class Pools(nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [
            F.max_pool2d(x, 2), F.max_pool2d(x, 3, stride=2, padding=1, dilation=1),
            F.max_pool2d(x, 3, stride=2, ceil_mode=True), F.max_pool2d(x, 2, dilation=2),
            F.avg_pool2d(x, 3, stride=2, padding=1), F.avg_pool2d(x, 3, 2, 1,
            count_include_pad=False), F.avg_pool2d(x, 2, ceil_mode=True),
            F.adaptive_avg_pool2d(x, (3, 2)), F.adaptive_avg_pool2d(x, 1),
            F.adaptive_max_pool2d(x, 3), F.max_pool1d(x[:, 0], 2), F.avg_pool1d(x[:, 0], 3),
            F.max_pool2d(x, 2, return_indices=True)[1],
        ]  # fmt: skip


class Pools3d(nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [F.max_pool3d(x, 2), F.avg_pool3d(x, 2, stride=1, padding=1),
                F.adaptive_avg_pool3d(x, 2)]  # fmt: skip


def image(n: int, c: int, h: int, w: int) -> list[Any]:
    return [torch.randn(n, c, h, w)]


def signal_and_volume(n: int, length: int, d: int) -> list[Any]:
    return [torch.randn(n, 2, length), torch.randn(n, 2, d, d + 1, d)]


def volume(n: int, d: int) -> list[Any]:
    return [torch.randn(n, 3, d, d + 1, d + 2)]


IMAGE = {"n": 2, "c": 3, "h": 8, "w": 10}
SMALL_SIGNAL = {"n": 3, "length": 8, "d": 3}


@pytest.mark.parametrize(
    ("model", "make", "sizes"),
    [
        (Conv2dStack(), image, [IMAGE, {"n": 1, "c": 3, "h": 7, "w": 5}]),
        (Conv1d3d(), signal_and_volume, [{"n": 2, "length": 11, "d": 4}, SMALL_SIGNAL]),
        # ceil_mode and the 1-d pools over x[:, 0] fix the width (export specializes it)
        (Pools(), image, [{"n": 2, "c": 3, "h": 9, "w": 8}, {"n": 1, "c": 2, "h": 7, "w": 8}]),
        (Pools3d(), volume, [{"n": 2, "d": 4}, {"n": 1, "d": 5}]),
    ],
    ids=["conv2d", "conv1d_3d", "pool2d", "pool3d"],
)  # fmt: skip
def test_conv_pool(
    model: nn.Module, make: Any, sizes: list[dict[str, int]], tmp_path: Path
) -> None:
    torch.manual_seed(0)
    check_lowering(model, make, sizes, tmp_path)
