"""Tracing a model to a core-ATen graph with symbolic input sizes.

Every dim of every tensor input is exported as `Dim.AUTO`, so the graph's sizes are sympy
expressions over the input sizes (dims of size 0 or 1, or that the model's code fixes, are
specialized to constants by torch.export). If that fails, the model is exported with static
shapes: the kernel then only accepts the example's shapes, which it checks at run time.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch.export import Dim, ExportedProgram

from apps.operators.lowering.errors import LoweringError

SCALARS = (bool, int, float)


def check_inputs(example_inputs: list[Any]) -> None:
    for position, value in enumerate(example_inputs):
        if not isinstance(value, (torch.Tensor, *SCALARS)):
            raise LoweringError(
                f"input {position} is a {type(value).__name__}: only tensors and scalars lower"
            )


def dynamic_shapes(example_inputs: list[Any]) -> tuple[Any, ...]:
    return tuple(
        {d: Dim.AUTO for d in range(v.dim())} if isinstance(v, torch.Tensor) and v.dim() else None
        for v in example_inputs
    )


def for_signature(model: torch.nn.Module, shapes: tuple[Any, ...]) -> Any:
    """torch.export wants a `forward(self, *inputs)` model's shapes under that parameter's
    name (refrun's FlatInputs has one)."""
    parameters = list(inspect.signature(model.forward).parameters.values())
    if len(parameters) == 1 and parameters[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return {parameters[0].name: shapes}
    return shapes


def trace(model: torch.nn.Module, example_inputs: list[Any]) -> ExportedProgram:
    """The model's forward as a core-ATen ExportedProgram, dynamic in its input sizes if can."""
    check_inputs(example_inputs)
    args = tuple(example_inputs)
    try:
        program = torch.export.export(model, args, dynamic_shapes=for_signature(
            model, dynamic_shapes(example_inputs)))  # fmt: skip
    except Exception:  # some models only trace with static shapes (documented above)
        try:
            program = torch.export.export(model, args)
        except Exception as error:
            raise LoweringError(
                f"torch.export could not trace the model: {first_line(error)}"
            ) from error
    try:
        decomposed: ExportedProgram = program.run_decompositions()
        return decomposed
    except Exception as error:
        raise LoweringError(f"decomposing to core ATen failed: {first_line(error)}") from error


def first_line(error: Exception) -> str:
    """torch.export's messages run to dozens of lines of debugging advice; the first says
    what stopped it."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(error).__name__
