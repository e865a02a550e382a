"""keep_buffers: a lowered kernel's temporaries kept from one call to the next compute what
the kernel did, on calls of growing and shrinking sizes, and the helpers' own allocations
are left alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from apps.agents.offline.evidence import LOWERINGS, prior_order
from apps.agents.offline.features import kernel_features
from apps.agents.offline.transforms import Strategy, TransformError, apply
from apps.operators.lowering import lower_module
from tests.operators.lowering_support import assert_matches, compile_kernel, run_lowered

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
KEEP = Strategy.make("keep_buffers")


class HardSigmoidSum(torch.nn.Module):
    """Several elementwise ops, so the lowered kernel has several temporaries."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardsigmoid(x) * torch.sigmoid(x) + x


@needs_gcc
def test_kept_temporaries_compute_what_fresh_ones_did_as_sizes_change(tmp_path: Path) -> None:
    model = HardSigmoidSum()
    lowered = lower_module(model, [torch.randn(4, 6)])
    assert lowered.count("kope_alloc(") >= 2
    kept = apply(KEEP, lowered)
    assert "kope_alloc(" not in kept.split("int kope_kernel(")[1]
    kernel = compile_kernel(kept, tmp_path)

    for shape in [(4, 6), (40, 60), (3, 5), (40, 61)]:  # grows, shrinks, grows past it again
        assert_matches(*run_lowered(kernel, model, [torch.randn(*shape)]), 1e-6, 1e-6)


def test_a_kernel_without_freed_allocations_or_already_keeping_them_is_refused() -> None:
    lowered = lower_module(torch.nn.ReLU(), [torch.randn(4, 6)])
    with pytest.raises(TransformError, match="no `p = malloc"):
        apply(KEEP, lowered)
    kept = apply(KEEP, lower_module(HardSigmoidSum(), [torch.randn(4, 6)]))
    with pytest.raises(TransformError, match="keeps its buffers already"):
        apply(KEEP, kept)


def test_a_lowered_kernels_temporaries_come_right_after_the_lowerings_in_the_prior() -> None:
    """Whole-tensor temporaries (kope_alloc) are fresh pages on every call; a hand-written
    kernel's scratch rows (malloc) are small, and keeping them waits for the threads."""
    lowered = lower_module(HardSigmoidSum(), [torch.randn(4, 6)])
    features = kernel_features(lowered)
    assert "temporaries" in features
    assert prior_order(features)[: len(LOWERINGS) + 1] == (*LOWERINGS, "keep_buffers")

    hand_written = prior_order(kernel_features(lowered.replace("kope_alloc(", "malloc(")))
    assert hand_written.index("omp_parallel_for") < hand_written.index("keep_buffers")
