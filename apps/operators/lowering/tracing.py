"""Tracing a model to a core-ATen graph with symbolic input sizes.

Every dim of every tensor input is exported as `Dim.AUTO`, so the graph's sizes are sympy
expressions over the input sizes (dims of size 0 or 1, or that the model's code fixes, are
specialized to constants by torch.export). If that fails, the model is exported with static
shapes: the kernel then only accepts the example's shapes, which it checks at run time.
"""

from __future__ import annotations

import inspect
from typing import Any

import sympy  # type: ignore[import-untyped]
import torch
from torch.export import Dim, ExportedProgram
from torch.export.graph_signature import (
    ConstantArgument,
    InputKind,
    OutputKind,
    TensorArgument,
)

from apps.operators.lowering.builder import meta_dims
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
    name (reference_loading's FlatInputs has one)."""
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


def accepts(
    program: ExportedProgram,
    example_inputs: list[Any],
    output_shapes: list[list[int]] | None = None,
) -> bool:
    """Whether the kernel lowered from `program` takes these inputs: the same number of
    tensors and scalars, each tensor of its dtype and rank, every size the trace fixed (by a
    size of 1, or by the model's code, as LayerNorm's normalized_shape does) the same, sizes
    the trace ties together equal, within the trace's ranges, and the same scalar values;
    and, where the call's output shapes are known, outputs of those shapes (a setting can
    make another output from the same inputs: a loss's reduction, Fill's shape)."""
    tensors = [v for v in example_inputs if isinstance(v, torch.Tensor)]
    scalars = [v for v in example_inputs if not isinstance(v, torch.Tensor)]
    placeholders, constants = user_inputs(program)
    if len(placeholders) != len(tensors) or constants != scalars:
        return False
    bound: dict[sympy.Symbol, int] = {}
    for node, value in zip(placeholders, tensors, strict=True):
        traced = node.meta["val"]
        if traced.dtype != value.dtype or traced.dim() != value.dim():
            return False
        for expr, size in zip(meta_dims(node), value.shape, strict=True):
            if not size_fits(expr, int(size), bound):
                return False
    return within_ranges(program, bound) and outputs_fit(program, output_shapes, bound)


def outputs_fit(
    program: ExportedProgram, shapes: list[list[int]] | None, bound: dict[sympy.Symbol, int]
) -> bool:
    if shapes is None:
        return True
    output = next(n for n in program.graph.nodes if n.op == "output")
    specs = program.graph_signature.output_specs
    nodes = [result for spec, result in zip(specs, output.args[0], strict=True)
             if spec.kind == OutputKind.USER_OUTPUT]  # fmt: skip
    if len(nodes) != len(shapes):
        return False
    for node, shape in zip(nodes, shapes, strict=True):
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor) or value.dim() != len(shape):
            return False
        if not all(size_fits(e, int(s), dict(bound)) for e, s in zip(meta_dims(node), shape,
                                                                      strict=True)):  # fmt: skip
            return False
    return True


def user_inputs(program: ExportedProgram) -> tuple[list[torch.fx.Node], list[Any]]:
    """The traced call's tensor placeholders, and its scalar values, in order."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    tensors, scalars = [], []
    for spec in program.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        if isinstance(spec.arg, TensorArgument):
            tensors.append(placeholders[spec.arg.name])
        elif isinstance(spec.arg, ConstantArgument):
            scalars.append(spec.arg.value)
    return tensors, scalars


def size_fits(expr: sympy.Expr, size: int, bound: dict[sympy.Symbol, int]) -> bool:
    if isinstance(expr, sympy.Symbol):
        return bound.setdefault(expr, size) == size
    value = expr.subs(bound)
    return not value.is_number or int(value) == size


def within_ranges(program: ExportedProgram, bound: dict[sympy.Symbol, int]) -> bool:
    for symbol, limits in program.range_constraints.items():
        size = bound.get(symbol)
        if size is not None and not limits.lower <= size <= limits.upper:
            return False
    return True
