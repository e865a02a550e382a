"""Lowering elementwise ops: unary math, binary ops with broadcasting and scalars, casts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.operators.lowering_support import check_lowering


class Activations(nn.Module):
    """Every activation a KernelBench level-1 problem uses, one after another."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [
            torch.relu(x), torch.sigmoid(x), torch.tanh(x), F.gelu(x),
            F.gelu(x, approximate="tanh"), F.silu(x), F.softplus(x), F.elu(x, alpha=0.7),
            F.leaky_relu(x, 0.02), F.hardtanh(x, -0.5, 0.5), F.hardsigmoid(x), F.hardswish(x),
            F.selu(x), F.mish(x), torch.clamp(x, min=-0.3, max=0.8), x.clamp_min(0.1),
            F.relu6(x * 4), F.softsign(x), F.logsigmoid(x), F.celu(x), torch.sign(x),
        ]  # fmt: skip


class Math(nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        a = x.abs() + 0.1
        return [
            torch.exp(x), torch.log(a), torch.sqrt(a), torch.rsqrt(a), torch.abs(x), -x,
            torch.reciprocal(a), torch.sin(x), torch.cos(x), torch.erf(x), x.pow(3),
            a.pow(0.7), torch.log1p(a), torch.floor(x * 3), torch.round(x * 3),
            torch.expm1(x),
        ]  # fmt: skip


class Binary(nn.Module):
    """Broadcasting (N, 1, D) against (M, D), scalars on either side, comparisons, where."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        a = x.unsqueeze(1)
        return [
            a + y, a - 2.5 * y, a * y, a / (y.abs() + 1), torch.maximum(a, y),
            torch.minimum(a, y), torch.where(a > y, a, y), (a.abs() + 1).pow(y),
            (a > 0) & (y < 0.5), (a == a) | (y != y), a >= y, 3 - y, 1 / (y.abs() + 1),
            torch.remainder(y, 0.7), torch.fmod(y, 0.7), torch.atan2(a, y),
            torch.where(y > 0, y, 0.0), y.masked_fill(y < 0, -1.5),
        ]  # fmt: skip


class Casts(nn.Module):
    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> list[torch.Tensor]:
        return [
            x.to(torch.float64) * 2, (x * 10).to(torch.int32), idx.float() / 3,
            idx + 1, idx * idx, (x > 0).float(), (x > 0).sum(dim=-1), idx // 3,
            torch.zeros_like(x) + 1, torch.arange(x.shape[-1]) * x, torch.full_like(x, 2.5),
        ]  # fmt: skip


def one(n: int, d: int) -> list[Any]:
    return [torch.randn(n, d)]


def pair(n: int, m: int, d: int) -> list[Any]:
    return [torch.randn(n, d), torch.randn(m, d)]


def with_ints(n: int, d: int) -> list[Any]:
    return [torch.randn(n, d), torch.randint(-20, 20, (n, d))]


@pytest.mark.parametrize(
    ("model", "make", "sizes"),
    [
        (Activations(), one, [{"n": 4, "d": 16}, {"n": 3, "d": 7}]),
        (Math(), one, [{"n": 4, "d": 16}, {"n": 5, "d": 3}]),
        (Binary(), pair, [{"n": 3, "m": 4, "d": 8}, {"n": 5, "m": 2, "d": 3}]),
        (Casts(), with_ints, [{"n": 4, "d": 6}, {"n": 3, "d": 5}]),
    ],
    ids=["activations", "math", "binary", "casts"],
)
def test_elementwise(
    model: nn.Module, make: Any, sizes: list[dict[str, int]], tmp_path: Path
) -> None:
    check_lowering(model, make, sizes, tmp_path)


class Scaled(nn.Module):
    """A scalar input (NPUKernelBench style) reaches the kernel as an attribute."""

    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.relu(x) * scale


def test_scalar_input_is_an_attribute(tmp_path: Path) -> None:
    def make(n: int) -> list[Any]:
        return [torch.randn(n, 5), 0.75]

    source = check_lowering(Scaled(), make, [{"n": 4}, {"n": 9}], tmp_path)
    assert "attrs[n_attrs - 1]" in source


class IsInfAsFloat(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.isinf(x).to(x.dtype) + torch.isnan(x).to(x.dtype)


def test_a_predicate_is_0_or_1_even_where_c_gives_another_nonzero(tmp_path: Path) -> None:
    """glibc's isinf(-INFINITY) is -1, which became 255 in a bool."""

    def inputs(n: int) -> list[Any]:
        x = torch.randn(n)
        x[::3], x[1::3] = float("-inf"), float("inf")
        x[2] = float("nan")
        return [x]

    check_lowering(IsInfAsFloat(), inputs, [{"n": 12}, {"n": 7}], tmp_path)


class FilledWithItem(nn.Module):
    def forward(self, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x, value.item()) + x * 0


def test_a_value_read_with_item_is_read_when_the_kernel_runs(tmp_path: Path) -> None:
    check_lowering(FilledWithItem(), lambda n, v: [torch.randn(n, 3), torch.tensor(v)],
                   [{"n": 4, "v": 2.5}, {"n": 5, "v": -7.0}], tmp_path)  # fmt: skip


class FlattenedByItsOwnSizes(nn.Module):
    """NPUKernelBench's MulSigmoid computes a size so."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = torch.prod(torch.tensor(x.shape[1:])).item()
        return x.reshape(x.shape[0], flat) * 2


def test_an_item_known_from_the_sizes_is_that_expression(tmp_path: Path) -> None:
    """The value's symbol is an expression of the bound sizes (s1 * s2), not one of its own."""
    check_lowering(FlattenedByItsOwnSizes(), lambda n, m: [torch.randn(3, n, m)],
                   [{"n": 4, "m": 5}, {"n": 7, "m": 2}], tmp_path)  # fmt: skip


class CopiedInPlace(nn.Module):
    """NPUKernelBench's BatchNormV3 and InplaceAddLayerNorm write their result with copy_."""

    def forward(self, x: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        out.copy_(row * 2)  # broadcast over x's rows
        return out + x


def test_an_in_place_copy_broadcasts_its_source(tmp_path: Path) -> None:
    check_lowering(CopiedInPlace(), lambda n: [torch.randn(n, 5), torch.randn(5)],
                   [{"n": 3}, {"n": 6}], tmp_path)  # fmt: skip
