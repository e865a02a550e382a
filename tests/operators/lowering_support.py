"""Shared by the lowering tests: lower a model, compile the C with gcc, run it via ctypes on
real tensors and compare with the model's own outputs."""

from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from apps.operators.lowering import lower_module
from apps.operators.reference_loading import as_list
from apps.operators.refrun import run_kernel

INCLUDE = Path(__file__).resolve().parents[2] / "apps" / "devices" / "cpu_c"
GCC = ["gcc", "-O1", "-std=c11", "-shared", "-fPIC", "-Werror=implicit-function-declaration"]


def compile_kernel(source: str, directory: Path, name: str = "k") -> Any:
    c_file, so_file = directory / f"{name}.c", directory / f"{name}.so"
    c_file.write_text(source)
    built = subprocess.run(
        [*GCC, "-I", str(INCLUDE), "-o", str(so_file), str(c_file), "-lm"],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    kernel = ctypes.CDLL(str(so_file)).kope_kernel
    kernel.restype = ctypes.c_int
    return kernel


def run_lowered(
    kernel: Any, model: torch.nn.Module, case: list[Any]
) -> tuple[list[Any], list[Any]]:
    """(kernel outputs, model outputs) for one list of inputs."""
    with torch.no_grad():
        results = model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in case])
    # Kernels write contiguous outputs (a view's strides are the model's business).
    expected = [t.contiguous() for t in as_list(results)]
    tensors = [v for v in case if isinstance(v, torch.Tensor)]
    scalars = [float(v) for v in case if not isinstance(v, torch.Tensor)]
    return run_kernel(kernel, tensors, expected, scalars), expected


def assert_matches(actual: list[Any], expected: list[Any], rtol: float, atol: float) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        if want.is_floating_point():
            worst = (got.double() - want.double()).abs().max() if want.numel() else 0
            assert torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True), worst
        else:
            assert torch.equal(got, want), (got, want)


def check_lowering(
    model: torch.nn.Module,
    make_inputs: Callable[..., list[Any]],
    sizes: list[dict[str, int]],
    tmp_path: Path,
    rtol: float = 1e-4,
    atol: float = 1e-4,
) -> str:
    """Lowers with inputs of the first sizes, then checks the kernel at every sizes given
    (later ones differently sized, odd), against the model. Returns the C source."""
    model = model.eval()
    torch.manual_seed(0)
    source = lower_module(model, make_inputs(**sizes[0]))
    kernel = compile_kernel(source, tmp_path)
    for seed, size in enumerate(sizes):
        torch.manual_seed(seed + 1)
        actual, expected = run_lowered(kernel, model, make_inputs(**size))
        assert_matches(actual, expected, rtol, atol)
    return source
