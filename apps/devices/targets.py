"""Targets: where a candidate kernel runs, and what the workbench needs to know about each.

A target declares its language, how a candidate is compiled and evaluated, which dtypes its
tensors can hold, its diagnostic tools, the Celery queue its device workers consume, and
whether the host asking can run it. `cpu-c` runs everywhere; the GPU targets (`triton`,
`cuda`, apps/devices/gpu/) run on CUDA hosts' workers (`device.cuda`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from apps.core.errors import DomainError
from apps.operators.targets import TARGET_DTYPES


@dataclass(frozen=True)
class Target:
    name: str
    language: str
    entry_point: str  # what every candidate defines
    queue: str  # the Celery queue of the device workers that own this target's devices
    tools: tuple[str, ...]  # diagnostics offered on request
    evaluate: Callable[..., dict[str, Any]]  # (OperatorUnderTest, source, EvalSettings) -> verdict
    # Whether `evaluate` takes baseline_source=: the parent kernel, timed beside the candidate.
    times_baseline: bool = False
    # What this host can do with the target: (usable, what there is or why not).
    availability: Callable[[], tuple[bool, str]] = lambda: (True, "")

    @property
    def dtypes(self) -> frozenset[str]:
        return TARGET_DTYPES[self.name]


def _evaluate_cpu_c(*args: Any, **kwargs: Any) -> dict[str, Any]:
    from apps.devices.evaluator import evaluate_candidate

    return evaluate_candidate(*args, **kwargs)


CPU_C = Target(
    name="cpu-c",
    language="C11 with OpenMP, compiled by gcc into a shared object called through kope_kernel.h",
    entry_point="kope_kernel",
    queue="device.cpu",
    tools=("cachegrind profile", "ASan + UBSan run", "KOPE_DUMP buffer dumps"),
    evaluate=_evaluate_cpu_c,
    times_baseline=True,
)


def _evaluate_triton(*args: Any, **kwargs: Any) -> dict[str, Any]:
    from apps.devices.gpu.evaluator import evaluate_triton

    return evaluate_triton(*args, **kwargs)


def _evaluate_cuda(*args: Any, **kwargs: Any) -> dict[str, Any]:
    from apps.devices.gpu.evaluator import evaluate_cuda

    return evaluate_cuda(*args, **kwargs)


def _triton_availability() -> tuple[bool, str]:
    from apps.devices.gpu.device import triton_availability

    available = triton_availability()
    return available.ok, available.detail


def _cuda_availability() -> tuple[bool, str]:
    from apps.devices.gpu.device import cuda_availability

    available = cuda_availability()
    return available.ok, available.detail


TRITON = Target(
    name="triton",
    language="Python with @triton.jit kernels and a launcher kope_kernel(inputs, outputs, attrs)",
    entry_point="kope_kernel",
    queue="device.cuda",
    tools=(
        "torch.profiler kernel timeline",
        "Nsight Compute metrics (where ncu is installed)",
        "TRITON_INTERPRET=1 runs",
    ),
    evaluate=_evaluate_triton,
    availability=_triton_availability,
)

CUDA = Target(
    name="cuda",
    language="CUDA C++ compiled by nvcc into a shared object called through kope_cuda.h",
    entry_point="kope_kernel",
    queue="device.cuda",
    tools=("torch.profiler kernel timeline", "Nsight Compute metrics (where ncu is installed)"),
    evaluate=_evaluate_cuda,
    availability=_cuda_availability,
)

TARGETS = {target.name: target for target in (CPU_C, TRITON, CUDA)}


def target_get(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise DomainError(
            f"target {name!r} is not available (available: {', '.join(TARGETS)})"
        ) from None
