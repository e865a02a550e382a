"""Lowering a PyTorch reference model to a naive, correct C kernel (apps/devices/cpu_c ABI).

`lower_module(model, example_inputs)` traces the model with torch.export (input sizes
symbolic), decomposes it to core ATen and writes one plain loop nest per op. Parameters and
buffers are embedded as static arrays; Python scalar inputs are expected in `attrs` with the
values they had when traced. Uses only torch and the standard library: it runs in the
reference runner's sandbox.
"""

from __future__ import annotations

from typing import Any

import torch

from apps.operators.lowering.errors import LoweringError

__all__ = ["LoweringError", "lower_module"]


def lower_module(model: torch.nn.Module, example_inputs: list[Any]) -> str:
    """C source of a kope_kernel computing `model(*example_inputs)` for inputs of any size
    the traced graph allows. Raises LoweringError naming what cannot be lowered."""
    from apps.operators.lowering.emit import generate
    from apps.operators.lowering.tracing import trace

    with torch.no_grad():
        program = trace(model, example_inputs)
    return generate(program)
