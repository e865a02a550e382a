"""What a host without a GPU says about the GPU targets, and how they are registered."""

from __future__ import annotations

import pytest

from apps.devices.gpu.device import cuda_device, no_device_reason, triton_availability
from apps.devices.targets import TARGETS, target_get
from apps.operators.targets import unsupported_targets

pytestmark = pytest.mark.skipif(cuda_device() is not None, reason="a host without a GPU")


def test_without_a_gpu_triton_runs_in_its_interpreter_and_says_why() -> None:
    available = triton_availability()

    assert available.ok
    assert "interpreter on the CPU" in available.detail and "no timing" in available.detail
    assert "sees no CUDA device" in no_device_reason()
    assert target_get("triton").availability() == (True, available.detail)
    assert target_get("cuda").availability()[0] is False


def test_both_gpu_targets_are_served_by_the_cuda_device_queue() -> None:
    assert [t.queue for t in TARGETS.values()] == ["device.cpu", "device.cuda", "device.cuda"]
    assert target_get("cpu-c").availability() == (True, "")


def test_half_precision_cases_are_unsupported_on_cpu_c_only() -> None:
    assert unsupported_targets({"float16", "float32"}) == ["cpu-c"]
    assert unsupported_targets({"float32", "int64"}) == []
