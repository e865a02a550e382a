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
# A model, an example call, and optionally the attributes that call's kernel is given first
# (the settings its model was built with, as numbers: a trace runs only where they are equal)
# and the call's output shapes, where known.
Example = (
    tuple[ModelSource, list[Any]]
    | tuple[ModelSource, list[Any], list[float]]
    | tuple[ModelSource, list[Any], list[float], list[list[int]] | None]
)


def lower_variants(examples: Iterable[Example]) -> tuple[str, list[str]]:
    """One kope_kernel for calls like the examples: an example no earlier trace takes is
    traced (its model built then, when given as a function), up to MAX_VARIANTS of them, and
    the kernel runs the first trace whose attributes, ranks, dtypes, fixed sizes and scalars
    fit the call. Returns the source and why each example that would not lower was left out;
    raises LoweringError (the first example's reason) when none lowers."""
    from apps.operators.lowering.emit import Traced, generate
    from apps.operators.lowering.tracing import accepts, trace

    traced: list[Traced] = []
    left_out: list[str] = []
    attempts = 0
    for model, inputs, *given in examples:
        attributes: list[float] = list(given[0]) if given else []  # type: ignore[arg-type]
        outputs: list[list[int]] | None = given[1] if len(given) > 1 else None  # type: ignore[assignment]
        if any(t.attributes == attributes and accepts(t.program, inputs, outputs)
               for t in traced):  # fmt: skip
            continue
        if attempts == MAX_VARIANTS:
            break
        attempts += 1
        try:
            with torch.no_grad():
                program = trace(model if isinstance(model, torch.nn.Module) else model(), inputs)
            generate([Traced(program, attributes)])  # an op it cannot lower raises here
            traced.append(Traced(program, attributes))
        except LoweringError as error:
            left_out.append(str(error))
    if not traced:
        raise LoweringError(left_out[0] if left_out else "no example call to trace")
    return generate(traced), left_out
