"""Lowering views and data movement; outputs that are views or inputs are copied out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.operators.lowering_support import check_lowering


class Layout(nn.Module):
    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> list[torch.Tensor]:
        return [
            x.permute(0, 2, 1, 3).contiguous(), x.transpose(1, 3), x.reshape(x.shape[0], -1),
            x.flatten(1) * 2, x.unsqueeze(1).expand(-1, 3, -1, -1, -1), x[:, 1:, ::2, -2:],
            x[:, 0], x[..., -1], torch.cat([x, x * 2], dim=2), torch.stack([x, -x], dim=1),
            x.flip(1, 3), x.repeat(1, 2, 1, 2), F.pad(x, (1, 2, 0, 1), value=0.5),
            x.chunk(2, dim=3)[1], x.split(1, dim=1)[0], torch.roll(x, 1, dims=2),
            torch.gather(x, 3, idx), torch.index_select(x, 2, idx[0, 0, 0, :2]),
            torch.tril(x[0, 0]), x.squeeze(0).unsqueeze(-1), x, torch.diagonal(x[0], dim1=1,
            dim2=2),
        ]  # fmt: skip


def layout_inputs(n: int, c: int, h: int, w: int) -> list[Any]:
    return [torch.randn(n, c, h, w), torch.randint(0, min(h, w), (n, c, h, w))]


def test_layout(tmp_path: Path) -> None:
    # split(1, dim=1) fixes the channel count: torch.export specializes it, so it stays 3.
    sizes = [{"n": 2, "c": 3, "h": 4, "w": 6}, {"n": 3, "c": 3, "h": 5, "w": 3}]
    check_lowering(Layout(), layout_inputs, sizes, tmp_path)


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(10, 4)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.table(tokens)


def test_embedding(tmp_path: Path) -> None:
    def make(b: int, t: int) -> list[Any]:
        return [torch.randint(0, 10, (b, t))]

    torch.manual_seed(0)
    check_lowering(Embed(), make, [{"b": 2, "t": 5}, {"b": 3, "t": 7}], tmp_path)
