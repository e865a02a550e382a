"""Lowering the loss functions KernelBench level 1 uses; they decompose to ops lowered
elsewhere (reductions, log_softmax, gather, where)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.operators.lowering_support import check_lowering


class Losses(nn.Module):
    def forward(
        self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, target: torch.Tensor
    ) -> list[torch.Tensor]:
        return [
            F.mse_loss(x, y), F.cross_entropy(x, target), F.smooth_l1_loss(x, y),
            F.kl_div(torch.log_softmax(x, 1), torch.softmax(y, 1), reduction="batchmean"),
            torch.mean(torch.clamp(1 - x * y, min=0)), F.triplet_margin_loss(x, y, z),
            torch.mean(1 - F.cosine_similarity(x, y, dim=1)), F.huber_loss(x, y, delta=0.5),
            F.l1_loss(x, y), F.nll_loss(torch.log_softmax(x, 1), target),
            F.binary_cross_entropy_with_logits(x, torch.sigmoid(y)),
        ]  # fmt: skip


def batch(n: int, k: int) -> list[Any]:
    return [torch.randn(n, k), torch.randn(n, k), torch.randn(n, k), torch.randint(0, k, (n,))]


def test_losses(tmp_path: Path) -> None:
    check_lowering(Losses(), batch, [{"n": 8, "k": 5}, {"n": 3, "k": 7}], tmp_path)
