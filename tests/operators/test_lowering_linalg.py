"""Lowering matrix products: mm, bmm, matmul with broadcasting, linear layers, baddbmm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tests.operators.lowering_support import check_lowering


class Products(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> list[torch.Tensor]:
        return [
            torch.matmul(a, b), torch.bmm(c, c.transpose(1, 2)), a @ b[:, 0], a.t() @ a,
            torch.baddbmm(c, c, c.transpose(1, 2), beta=0.5, alpha=2.0),
            torch.matmul(c, c[0]), torch.einsum("bij,bjk->bik", c, c),
        ]  # fmt: skip


def mats(m: int, k: int, n: int, b: int, s: int) -> list[Any]:
    return [torch.randn(m, k), torch.randn(k, n), torch.randn(b, s, s)]


def test_products(tmp_path: Path) -> None:
    sizes = [{"m": 6, "k": 5, "n": 7, "b": 2, "s": 4}, {"m": 9, "k": 3, "n": 2, "b": 3, "s": 5}]
    check_lowering(Products(), mats, sizes, tmp_path)


class Mlp(nn.Module):
    """Linear -> GELU -> Linear over a (batch, tokens, features) input, like an MLP block."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(12, 24)
        self.down = nn.Linear(24, 10, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


def tokens(b: int, t: int) -> list[Any]:
    return [torch.randn(b, t, 12)]


def test_linear_layers(tmp_path: Path) -> None:
    torch.manual_seed(0)
    check_lowering(Mlp(), tokens, [{"b": 2, "t": 5}, {"b": 3, "t": 1}, {"b": 1, "t": 7}], tmp_path)


class Attention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def qkv(b: int, h: int, s: int, e: int) -> list[Any]:
    return [torch.randn(b, h, s, e) for _ in range(3)]


def test_attention(tmp_path: Path) -> None:
    check_lowering(Attention(), qkv, [{"b": 2, "h": 2, "s": 6, "e": 8},
                                      {"b": 1, "h": 3, "s": 5, "e": 4}], tmp_path)  # fmt: skip
