"""The built-in suite's level-1 operators: every Triton starting kernel passes its reference on
the CPU in Triton's interpreter (small cases), all in one confined child."""

from __future__ import annotations

import pytest

from apps.devices.gpu.check import TritonKernelToCheck, check_triton_many
from apps.devices.gpu.device import cuda_device
from apps.devices.gpu.suite import LEVEL_ONE, builtin_folder

pytestmark = pytest.mark.skipif(cuda_device() is not None, reason="the interpreter path")


def test_every_level_one_starting_kernel_passes_in_the_interpreter() -> None:
    folders = [builtin_folder(slug) for slug in LEVEL_ONE]
    kernels = [TritonKernelToCheck(f.spec, f.reference_source, f.triton_source) for f in folders]

    results = check_triton_many(kernels, seed=7)

    for slug, checks in zip(LEVEL_ONE, results, strict=True):
        assert len(checks) >= 4, f"{slug}: only {len(checks)} cases small enough"
        failed = [f"{c.case_id}: {c.detail}" for c in checks if not c.passed]
        assert not failed, f"{slug}: {failed}"


def test_a_wrong_kernel_fails_the_check_with_its_numbers() -> None:
    relu = builtin_folder("relu")
    wrong = relu.triton_source.replace("tl.where(x > 0.0, x, 0.0)", "tl.where(x > 0.0, x, 1.0)")

    (checks,) = check_triton_many([TritonKernelToCheck(relu.spec, relu.reference_source, wrong)])

    assert sum(not c.passed for c in checks) >= 3  # n = 1 may draw no negative number
    assert any(not c.passed and c.detail.startswith("max_abs=1 ") for c in checks)
