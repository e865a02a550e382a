"""Lowering the KernelBench-style sample problems, constructed the way refrun does."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from apps.operators.lowering import lower_module
from tests.operators.lowering_support import assert_matches, compile_kernel, run_lowered

LEVEL1 = Path(__file__).resolve().parent / "samples" / "kernelbench" / "level1"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"lowering_sample_{name}", LEVEL1 / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "sizes"),
    [
        ("1_ReLU.py", [{"batch_size": 4, "dim": 64}, {"batch_size": 3, "dim": 17}]),
        ("2_Matmul_with_init.py", [{"batch_size": 8, "in_features": 32, "out_features": 16},
                                   {"batch_size": 5, "in_features": 32, "out_features": 16}]),
    ],
)  # fmt: skip
def test_sample_problem(name: str, sizes: list[dict[str, Any]], tmp_path: Path) -> None:
    problem = load(name)
    vars(problem).update(sizes[0])
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs()).eval()
    kernel = compile_kernel(lower_module(model, problem.get_inputs()), tmp_path)
    for seed, size in enumerate(sizes):
        vars(problem).update(size)  # later sizes: the weights stay, the batch changes
        torch.manual_seed(seed + 1)
        actual, expected = run_lowered(kernel, model, problem.get_inputs())
        assert_matches(actual, expected, rtol=1e-4, atol=1e-4)
