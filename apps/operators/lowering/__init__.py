"""Lowering a PyTorch reference model to a naive, correct C kernel (apps/devices/cpu_c ABI).

`lower_module(model, example_inputs)` traces the model with torch.export (input sizes
symbolic), decomposes it to core ATen and writes one plain loop nest per op;
`lower_variants` does so for several example calls that one trace cannot cover (another rank,
dtype, scalar value or size the model fixes) and dispatches between them. Constant tensors
are embedded as static arrays; Python scalar inputs are expected in `attrs` with the values
they had when traced. Uses only torch and the standard library: it runs in the reference
runner's sandbox.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.export import ExportedProgram

from apps.operators.lowering.errors import LoweringError

__all__ = ["LoweringError", "lower_module", "lower_variants"]


def lower_module(model: torch.nn.Module, example_inputs: list[Any]) -> str:
    """C source of a kope_kernel computing `model(*example_inputs)` for inputs of any size
    the traced graph allows. Raises LoweringError naming what cannot be lowered."""
    source, left_out = lower_variants([(model, example_inputs)])
    if left_out:
        raise LoweringError(left_out[0])
    return source


MAX_VARIANTS = 12  # NPUKernelBench's AbsMath needs 9: three ranks in each of three dtypes

ModelSource = torch.nn.Module | Callable[[], torch.nn.Module]


def lower_variants(examples: Iterable[tuple[ModelSource, list[Any]]]) -> tuple[str, list[str]]:
    """One kope_kernel for calls like the examples: an example no earlier trace takes is
    traced (its model built then, when given as a function), up to MAX_VARIANTS of them, and
    the kernel runs the first trace whose ranks, dtypes, fixed sizes and scalars fit the
    call. Returns the source and why each example that would not lower was left out; raises
    LoweringError (the first example's reason) when none lowers."""
    from apps.operators.lowering.emit import generate
    from apps.operators.lowering.tracing import accepts, trace

    programs: list[ExportedProgram] = []
    left_out: list[str] = []
    attempts = 0
    for model, inputs in examples:
        if any(accepts(program, inputs) for program in programs):
            continue
        if attempts == MAX_VARIANTS:
            break
        attempts += 1
        try:
            with torch.no_grad():
                program = trace(model if isinstance(model, torch.nn.Module) else model(), inputs)
            generate([program])  # an op it cannot lower raises here
            programs.append(program)
        except LoweringError as error:
            left_out.append(str(error))
    if not programs:
        raise LoweringError(left_out[0] if left_out else "no example call to trace")
    return generate(programs), left_out
