"""Targets: where a candidate kernel runs, and what the workbench needs to know about each.

A target declares its language, how a candidate is compiled and evaluated, which dtypes its
tensors can hold, its diagnostic tools, and the Celery queue its device workers consume.
`cpu-c` is the first; GPU targets (triton, cuda) plug in with their own entry here.
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
)

TARGETS = {target.name: target for target in (CPU_C,)}


def target_get(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise DomainError(
            f"target {name!r} is not available (available: {', '.join(TARGETS)})"
        ) from None
