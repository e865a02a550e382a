"""Lowering a PyTorch reference model to a naive, correct C kernel (apps/devices/cpu_c ABI).

`lower_module(model, example_inputs)` traces the model with torch.export (input sizes
symbolic), decomposes it to core ATen and writes one plain loop nest per op;
`lower_variants` does so for several example calls that one trace cannot cover (another rank
or dtype) and dispatches between them. Constant tensors are embedded as static arrays;
Python scalar inputs are expected in `attrs` with the values they had when traced. Uses only
torch and the standard library: it runs in the reference runner's sandbox.
"""

from __future__ import annotations

from typing import Any

import torch

from apps.operators.lowering.errors import LoweringError

__all__ = ["LoweringError", "lower_module", "lower_variants"]


def lower_module(model: torch.nn.Module, example_inputs: list[Any]) -> str:
    """C source of a kope_kernel computing `model(*example_inputs)` for inputs of any size
    the traced graph allows. Raises LoweringError naming what cannot be lowered."""
    source, left_out = lower_variants([(model, example_inputs)])
    if left_out:
        raise LoweringError(left_out[0])
    return source


def lower_variants(examples: list[tuple[torch.nn.Module, list[Any]]]) -> tuple[str, list[str]]:
    """One kope_kernel for calls like the examples: each is traced, and the kernel runs the
    first trace whose ranks, dtypes, fixed sizes and scalars fit the call. Returns the source
    and why each example that would not lower was left out; raises LoweringError (the first
    example's reason) when none lowers."""
    from apps.operators.lowering.emit import generate
    from apps.operators.lowering.tracing import trace

    if not examples:
        raise LoweringError("no example call to trace")
    programs, left_out = [], []
    for model, inputs in examples:
        try:
            with torch.no_grad():
                program = trace(model, inputs)
            generate([program])  # an op it cannot lower raises here
            programs.append(program)
        except LoweringError as error:
            left_out.append(str(error))
    if not programs:
        raise LoweringError(left_out[0])
    return generate(programs), left_out
