"""Elementwise ops: unary math, binary arithmetic and comparisons with NumPy broadcasting,
dtype conversions, `where`, and tensor creation (full, arange, scalar_tensor)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy  # type: ignore[import-untyped]
import torch

from apps.operators.lowering.builder import (
    Buffer,
    Kernel,
    bind_args,
    ctype,
    is_float,
    literal,
    math_fn,
    meta_dtype,
    op_name,
)
from apps.operators.lowering.errors import LoweringError
from apps.operators.lowering.registry import lowers, lowers_each
from apps.operators.lowering.symbolic import c_int, row_major_offset

aten = torch.ops.aten
Operand = Buffer | str  # a tensor, or a scalar already written as a C expression
Formula = Callable[[list[str]], str]

SQRT1_2 = "0.70710678118654752440"
MATH_FUNCTIONS = [
    "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma",
]  # fmt: skip
SQRT_2_OVER_PI = "0.79788456080286535588"


def broadcast_offset(
    buffer: Buffer, out_dims: tuple[sympy.Expr, ...], index: list[sympy.Expr]
) -> sympy.Expr:
    """Offset into `buffer` for an output index, NumPy-broadcast (size-1 dims repeat)."""
    lead = len(out_dims) - buffer.rank
    own = [sympy.Integer(0) if size == 1 else index[lead + d] for d, size in enumerate(buffer.dims)]
    return row_major_offset(buffer.dims, own)


def pointwise(
    k: Kernel,
    node: torch.fx.Node,
    operands: Sequence[Operand],
    formula: Formula,
    compute: torch.dtype | None,
) -> None:
    """out[i] = formula(operands[i]...), each tensor operand cast to `compute` (None: as is)."""
    out = k.new_buffer(node)
    tensors = [o for o in operands if isinstance(o, Buffer)]
    flat = all(t.dims == out.dims or t.numel == 1 for t in tensors)
    with k.op(node), k.loops([out.numel] if flat else list(out.dims)) as index:
        names = []
        for position, operand in enumerate(operands):
            if isinstance(operand, str):
                names.append(operand)
                continue
            if flat:
                offset = index[0] if operand.dims == out.dims else sympy.Integer(0)
            else:
                offset = broadcast_offset(operand, out.dims, index)
            c = ctype(compute) if compute is not None else operand.ctype
            k.line(f"const {c} x{position} = ({c}){operand.at(offset)};")
            names.append(f"x{position}")
        out_offset = index[0] if flat else row_major_offset(out.dims, index)
        k.line(f"{out.at(out_offset)} = ({out.ctype})({formula(names)});")


def operand(k: Kernel, value: Any, dtype: torch.dtype) -> Operand:
    """A graph argument as an operand: the tensor's buffer, or the scalar as a C literal."""
    if isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), torch.Tensor):
        return k.value(value)
    return literal(value, dtype)


def scalar_type(values: Sequence[Any]) -> torch.dtype:
    """The C type a scalar operand is written in when operands are compared as they are."""
    has_float = any(isinstance(v, float) for v in values)
    return torch.float64 if has_float else torch.int64


# --- unary ops -----------------------------------------------------------------------------


def unary_table(dt: torch.dtype) -> dict[Any, Callable[[str], str]]:
    def f(name: str) -> Callable[[str], str]:
        return lambda x: f"{math_fn(name, dt)}({x})"

    one = "1" if not is_float(dt) else "1.0f" if dt == torch.float32 else "1.0"
    return {
        aten.relu.default: lambda x: f"{x} < 0 ? 0 : {x}",
        aten.sigmoid.default: lambda x: f"{one} / ({one} + {math_fn('exp', dt)}(-{x}))",
        aten.rsqrt.default: lambda x: f"{one} / {math_fn('sqrt', dt)}({x})",
        aten.reciprocal.default: lambda x: f"{one} / {x}",
        aten.neg.default: lambda x: f"-{x}",
        aten.abs.default: f("fabs") if is_float(dt) else (lambda x: f"{x} < 0 ? -{x} : {x}"),
        aten.sign.default: lambda x: f"{x} > 0 ? 1 : ({x} < 0 ? -1 : {x})",
        aten.sgn.default: lambda x: f"{x} > 0 ? 1 : ({x} < 0 ? -1 : {x})",
        aten.round.default: f("rint") if is_float(dt) else (lambda x: x),
        aten.floor.default: f("floor") if is_float(dt) else (lambda x: x),
        aten.ceil.default: f("ceil") if is_float(dt) else (lambda x: x),
        aten.trunc.default: f("trunc") if is_float(dt) else (lambda x: x),
        aten.silu.default: lambda x: f"{x} / ({one} + {math_fn('exp', dt)}(-{x}))",
        aten.mish.default: lambda x: (
            f"{x} * {math_fn('tanh', dt)}({math_fn('log1p', dt)}({math_fn('exp', dt)}({x})))"
        ),
        aten.hardsigmoid.default: lambda x: f"{x} <= -3 ? 0 : ({x} >= 3 ? 1 : {x} / 6 + 0.5)",
        aten.hardswish.default: lambda x: f"{x} <= -3 ? 0 : ({x} >= 3 ? {x} : {x} * ({x} + 3) / 6)",
        **{getattr(aten, name).default: f(name) for name in MATH_FUNCTIONS},
    }


def unary(k: Kernel, node: torch.fx.Node) -> None:
    dt = meta_dtype(node)
    formula = unary_table(dt)[node.target]
    pointwise(k, node, [k.value(node.args[0])], lambda x: formula(x[0]), dt)


for _op in unary_table(torch.float32):
    lowers(_op)(unary)


def predicate(formula: Callable[[str], str]) -> Callable[[Kernel, torch.fx.Node], None]:
    def lower(k: Kernel, node: torch.fx.Node) -> None:
        # C99 leaves the value of isinf() and friends unspecified beyond nonzero (glibc gives
        # -1 for -inf): the bool is made 0 or 1.
        pointwise(k, node, [k.value(node.args[0])], lambda x: f"({formula(x[0])}) != 0", None)

    return lower


lowers_each(
    {
        aten.logical_not.default: lambda x: f"!{x}",
        aten.isnan.default: lambda x: f"{x} != {x}",
        aten.isinf.default: lambda x: f"isinf({x})",
        aten.isfinite.default: lambda x: f"isfinite({x})",
    },
    predicate,
)


@lowers(aten.bitwise_not.default)
def bitwise_not(k: Kernel, node: torch.fx.Node) -> None:
    dt = meta_dtype(node)
    negate = "!" if dt == torch.bool else "~"
    pointwise(k, node, [k.value(node.args[0])], lambda x: f"{negate}{x[0]}", dt)


@lowers(aten.gelu.default)
def gelu(k: Kernel, node: torch.fx.Node) -> None:
    dt, approximate = meta_dtype(node), bind_args(node)["approximate"]
    erf, tanh = math_fn("erf", dt), math_fn("tanh", dt)

    def formula(x: list[str]) -> str:
        if approximate == "tanh":
            inner = f"{SQRT_2_OVER_PI} * ({x[0]} + 0.044715 * {x[0]} * {x[0]} * {x[0]})"
            return f"0.5 * {x[0]} * (1 + {tanh}({inner}))"
        return f"0.5 * {x[0]} * (1 + {erf}({x[0]} * {SQRT1_2}))"

    pointwise(k, node, [k.value(node.args[0])], formula, dt)


def parametric(make: Callable[[dict[str, Any], torch.dtype], Callable[[str], str]]) -> Any:
    """An elementwise op whose formula depends on scalar arguments (alpha, slope...)."""

    def lower(k: Kernel, node: torch.fx.Node) -> None:
        dt = meta_dtype(node)
        formula = make(bind_args(node), dt)
        pointwise(k, node, [k.value(node.args[0])], lambda x: formula(x[0]), dt)

    return lower


def clamp_formula(args: dict[str, Any], dt: torch.dtype) -> Callable[[str], str]:
    lo, hi = args.get("min"), args.get("max")

    def formula(x: str) -> str:
        text = x
        if lo is not None:
            text = f"({text} < {literal(lo, dt)} ? {literal(lo, dt)} : {text})"
        if hi is not None:
            text = f"({text} > {literal(hi, dt)} ? {literal(hi, dt)} : {text})"
        return text

    return formula


def pow_formula(args: dict[str, Any], dt: torch.dtype) -> Callable[[str], str]:
    exponent = args["exponent"]
    if exponent in (1, 2, 3) and not isinstance(exponent, bool):
        return lambda x: " * ".join([x] * int(exponent))
    if exponent == 0.5:
        return lambda x: f"{math_fn('sqrt', dt)}({x})"
    return lambda x: f"{math_fn('pow', dt)}({x}, {literal(exponent, dt)})"


def elu_formula(args: dict[str, Any], dt: torch.dtype) -> Callable[[str], str]:
    alpha, scale = literal(args["alpha"], dt), literal(args["scale"], dt)
    input_scale, expm1 = literal(args["input_scale"], dt), math_fn("expm1", dt)
    return lambda x: f"{x} > 0 ? {x} * {scale} : {expm1}({x} * {input_scale}) * {alpha} * {scale}"


def softplus_formula(args: dict[str, Any], dt: torch.dtype) -> Callable[[str], str]:
    beta, threshold = literal(args["beta"], dt), literal(args["threshold"], dt)
    log1p, exp = math_fn("log1p", dt), math_fn("exp", dt)
    return lambda x: f"{x} * {beta} > {threshold} ? {x} : {log1p}({exp}({x} * {beta})) / {beta}"


def leaky_relu_formula(args: dict[str, Any], dt: torch.dtype) -> Callable[[str], str]:
    slope = literal(args["negative_slope"], dt)
    return lambda x: f"{x} > 0 ? {x} : {x} * {slope}"


def threshold_formula(args: dict[str, Any], dt: torch.dtype) -> Callable[[str], str]:
    threshold, value = literal(args["threshold"], dt), literal(args["value"], dt)
    return lambda x: f"{x} <= {threshold} ? {value} : {x}"


lowers_each(
    {
        aten.clamp.default: clamp_formula,
        aten.clamp_min.default: lambda a, dt: clamp_formula({"min": a["min"]}, dt),
        aten.clamp_max.default: lambda a, dt: clamp_formula({"max": a["max"]}, dt),
        aten.hardtanh.default: lambda a, dt: clamp_formula(
            {"min": a["min_val"], "max": a["max_val"]}, dt
        ),
        aten.leaky_relu.default: leaky_relu_formula,
        aten.threshold.default: threshold_formula,
        aten.pow.Tensor_Scalar: pow_formula,
        aten.elu.default: elu_formula,
        aten.softplus.default: softplus_formula,
    },
    parametric,
)


# --- binary ops ----------------------------------------------------------------------------


def maximum(dt: torch.dtype, pick_greater: bool) -> Callable[[list[str]], str]:
    cmp = ">" if pick_greater else "<"
    if is_float(dt):  # NaN wins, as in torch
        return lambda x: f"({x[0]} {cmp} {x[1]} || {x[0]} != {x[0]}) ? {x[0]} : {x[1]}"
    return lambda x: f"{x[0]} {cmp} {x[1]} ? {x[0]} : {x[1]}"


def remainder(dt: torch.dtype) -> Callable[[list[str]], str]:
    if not is_float(dt):
        return lambda x: f"kope_mod({x[0]}, {x[1]})"
    fmod = math_fn("fmod", dt)
    return lambda x: (
        f"({fmod}({x[0]}, {x[1]}) != 0 && (({fmod}({x[0]}, {x[1]}) < 0) != ({x[1]} < 0)))"
        f" ? {fmod}({x[0]}, {x[1]}) + {x[1]} : {fmod}({x[0]}, {x[1]})"
    )


def division(dt: torch.dtype, rounding: str | None) -> Callable[[list[str]], str]:
    if rounding is None:
        return lambda x: f"{x[0]} / {x[1]}"
    if not is_float(dt):
        return (
            (lambda x: f"{x[0]} / {x[1]}")
            if rounding == "trunc"
            else (lambda x: f"kope_floordiv({x[0]}, {x[1]})")
        )
    return lambda x: f"{math_fn(rounding, dt)}({x[0]} / {x[1]})"


def arithmetic_formula(node: torch.fx.Node, dt: torch.dtype) -> Callable[[list[str]], str]:
    packet = node.target.overloadpacket  # type: ignore[union-attr]
    if packet in (aten.add, aten.sub):
        alpha = bind_args(node).get("alpha", 1)
        sign = "+" if packet == aten.add else "-"
        if alpha == 1:
            return lambda x: f"{x[0]} {sign} {x[1]}"
        return lambda x: f"{x[0]} {sign} {literal(alpha, dt)} * {x[1]}"
    simple: dict[Any, Callable[[list[str]], str]] = {
        aten.mul: lambda x: f"{x[0]} * {x[1]}",
        aten.maximum: maximum(dt, True),
        aten.minimum: maximum(dt, False),
        aten.fmax: lambda x: f"{math_fn('fmax', dt)}({x[0]}, {x[1]})",
        aten.fmin: lambda x: f"{math_fn('fmin', dt)}({x[0]}, {x[1]})",
        aten.pow: lambda x: f"{math_fn('pow', dt)}({x[0]}, {x[1]})",
        aten.atan2: lambda x: f"{math_fn('atan2', dt)}({x[0]}, {x[1]})",
        aten.hypot: lambda x: f"{math_fn('hypot', dt)}({x[0]}, {x[1]})",
        aten.copysign: lambda x: f"{math_fn('copysign', dt)}({x[0]}, {x[1]})",
        aten.fmod: (lambda x: f"{math_fn('fmod', dt)}({x[0]}, {x[1]})")
        if is_float(dt)
        else (lambda x: f"{x[0]} % {x[1]}"),
        aten.remainder: remainder(dt),
        aten.bitwise_and: lambda x: f"{x[0]} & {x[1]}",
        aten.bitwise_or: lambda x: f"{x[0]} | {x[1]}",
        aten.bitwise_xor: lambda x: f"{x[0]} ^ {x[1]}",
    }
    if packet == aten.div:
        return division(dt, bind_args(node).get("rounding_mode"))
    if packet not in simple:
        raise LoweringError(f"{op_name(node)}: not lowered")
    return simple[packet]


ARITHMETIC = [
    aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.mul.Tensor,
    aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode,
    aten.div.Scalar_mode, aten.maximum.default, aten.minimum.default, aten.fmax.default,
    aten.fmin.default, aten.pow.Tensor_Tensor, aten.atan2.default, aten.hypot.default,
    aten.copysign.Tensor, aten.fmod.Tensor, aten.fmod.Scalar, aten.remainder.Tensor,
    aten.remainder.Scalar, aten.bitwise_and.Tensor, aten.bitwise_and.Scalar,
    aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, aten.bitwise_xor.Tensor,
    aten.bitwise_xor.Scalar,
]  # fmt: skip


@lowers(*ARITHMETIC)
def arithmetic(k: Kernel, node: torch.fx.Node) -> None:
    dt = meta_dtype(node)
    if dt == torch.bool and node.target.overloadpacket in (aten.add, aten.mul):  # type: ignore[union-attr]
        formula: Formula = {aten.add: lambda x: f"{x[0]} || {x[1]}", aten.mul: lambda x: (
            f"{x[0]} && {x[1]}")}[node.target.overloadpacket]  # type: ignore[union-attr]  # fmt: skip
    else:
        formula = arithmetic_formula(node, dt)
    operands = [operand(k, a, dt) for a in node.args[:2]]
    pointwise(k, node, operands, formula, dt)


@lowers(aten.pow.Scalar)
def pow_scalar_base(k: Kernel, node: torch.fx.Node) -> None:
    dt = meta_dtype(node)
    operands: list[Operand] = [literal(node.args[0], dt), k.value(node.args[1])]
    pointwise(k, node, operands, lambda x: f"{math_fn('pow', dt)}({x[0]}, {x[1]})", dt)


COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
LOGICAL = {"logical_and": "&&", "logical_or": "||", "logical_xor": "!="}


def compare(symbol: str, logical: bool) -> Callable[[Kernel, torch.fx.Node], None]:
    def lower(k: Kernel, node: torch.fx.Node) -> None:
        other = scalar_type(node.args[:2])
        operands = [operand(k, a, other) for a in node.args[:2]]
        if logical:
            formula: Formula = lambda x: f"({x[0]} != 0) {symbol} ({x[1]} != 0)"  # noqa: E731
        else:
            formula = lambda x: f"{x[0]} {symbol} {x[1]}"  # noqa: E731
        pointwise(k, node, operands, formula, None)

    return lower


for _name, _symbol in COMPARISONS.items():
    lowers(getattr(aten, _name).Tensor, getattr(aten, _name).Scalar)(compare(_symbol, False))
for _name, _symbol in LOGICAL.items():
    lowers(getattr(aten, _name).default)(compare(_symbol, True))


@lowers(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(k: Kernel, node: torch.fx.Node) -> None:
    dt = meta_dtype(node)
    operands: list[Operand] = [k.value(node.args[0])]
    operands += [operand(k, a, dt) for a in node.args[1:3]]

    def formula(x: list[str]) -> str:
        return f"{x[0]} ? ({ctype(dt)}){x[1]} : ({ctype(dt)}){x[2]}"

    pointwise(k, node, operands, formula, None)


@lowers(aten.clamp.Tensor)
def clamp_tensor(k: Kernel, node: torch.fx.Node) -> None:
    dt, args = meta_dtype(node), bind_args(node)
    operands: list[Operand] = [k.value(args["self"])]
    bounds = []
    for key, cmp in (("min", "<"), ("max", ">")):
        if args[key] is not None:
            bounds.append((len(operands), cmp))
            operands.append(k.value(args[key]))

    def formula(x: list[str]) -> str:
        text = x[0]
        for position, cmp in bounds:
            text = f"({text} {cmp} {x[position]} ? {x[position]} : {text})"
        return text

    pointwise(k, node, operands, formula, dt)


# --- conversions and creation --------------------------------------------------------------


@lowers(aten._to_copy.default, aten.to.dtype, aten.type_as.default)
def to_copy(k: Kernel, node: torch.fx.Node) -> None:
    source, dt = k.value(node.args[0]), meta_dtype(node)
    if source.dtype == dt:
        k.alias(node, source)
        return
    formula: Formula = (lambda x: f"{x[0]} != 0") if dt == torch.bool else (lambda x: x[0])
    pointwise(k, node, [source], formula, None)


def fill(k: Kernel, node: torch.fx.Node, value: Any) -> None:
    dt = meta_dtype(node)
    pointwise(k, node, [literal(value, dt)], lambda x: x[0], dt)


@lowers(aten.full.default, aten.full_like.default, aten.new_full.default)
def full(k: Kernel, node: torch.fx.Node) -> None:
    fill(k, node, bind_args(node)["fill_value"])


@lowers(aten.scalar_tensor.default)
def scalar_tensor(k: Kernel, node: torch.fx.Node) -> None:
    fill(k, node, node.args[0])


@lowers(
    aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default, aten.empty.memory_format,
    aten.empty_like.default, aten.empty_permuted.default, aten.new_empty.default,
    aten.empty_strided.default,
)  # fmt: skip
def zeros(k: Kernel, node: torch.fx.Node) -> None:
    fill(k, node, 0)


@lowers(aten.ones.default, aten.ones_like.default, aten.new_ones.default)
def ones(k: Kernel, node: torch.fx.Node) -> None:
    fill(k, node, 1)


@lowers(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(k: Kernel, node: torch.fx.Node) -> None:
    args, dt = bind_args(node), meta_dtype(node)
    start = args.get("start", 0) if node.target != aten.arange.default else 0
    step = args.get("step", 1) or 1
    out = k.new_buffer(node)
    compute = torch.float64 if is_float(dt) else torch.int64
    first, stride = literal(start, compute), literal(step, compute)
    with k.op(node), k.loops([out.numel]) as (i,):
        k.line(f"{out.at(i)} = ({out.ctype})({first} + {c_int(i)} * {stride});")


@lowers(aten.copy.default)
def copy(k: Kernel, node: torch.fx.Node) -> None:
    """`tensor.copy_(src)` once functionalized: self's shape and dtype, src's values (broadcast)."""
    pointwise(k, node, [k.value(node.args[1])], lambda x: x[0], None)
