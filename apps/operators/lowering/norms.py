"""Normalizations: layer norm, batch norm (eval, and instance norm's batch statistics),
group norm. Statistics are accumulated in double."""

from __future__ import annotations

import sympy  # type: ignore[import-untyped]
import torch

from apps.operators.lowering.builder import Buffer, Kernel, bind_args, literal
from apps.operators.lowering.registry import lowers
from apps.operators.lowering.symbolic import c_int, product

aten = torch.ops.aten
EPS_TYPE = torch.float64


def optional(k: Kernel, value: object) -> Buffer | None:
    return k.value(value) if isinstance(value, torch.fx.Node) else None


def affine(weight: Buffer | None, bias: Buffer | None, channel: str) -> str:
    """` * w[c] + b[c]` for the optional per-channel weight and bias."""
    text = f" * {weight.name}[{channel}]" if weight is not None else ""
    return text + (f" + {bias.name}[{channel}]" if bias is not None else "")


def statistics(k: Kernel, source: Buffer, base: str, count: str, eps: str) -> None:
    """Declares `mean` and `rstd` of source[base + e], e < count (biased variance)."""
    k.line("double sum = 0, squares = 0;")
    k.line(f"for (int64_t e = 0; e < {count}; ++e) sum += {source.name}[{base} + e];")
    k.line(f"const double mean = sum / (double)({count});")
    with k.block(f"for (int64_t e = 0; e < {count}; ++e)"):
        k.line(f"const double d = {source.name}[{base} + e] - mean;")
        k.line("squares += d * d;")
    k.line(f"const double rstd = 1.0 / sqrt(squares / (double)({count}) + {eps});")


def save_stats(k: Kernel, node: torch.fx.Node, row: str) -> None:
    """Writes items 1 and 2 (mean, rstd) of a norm's result tuple, where used."""
    for index, name in ((1, "mean"), (2, "rstd")):
        if k.tuple_item(node, index) is not None:
            buffer = k.values.get(k.tuple_item(node, index))  # type: ignore[arg-type]
            assert buffer is not None
            k.line(f"{buffer.name}[{row}] = ({buffer.ctype}){name};")


def allocate_stats(k: Kernel, node: torch.fx.Node) -> None:
    for index in (1, 2):
        if k.tuple_item(node, index) is not None:
            k.new_buffer(node, index)


@lowers(aten.native_layer_norm.default)
def layer_norm(k: Kernel, node: torch.fx.Node) -> None:
    args = bind_args(node)
    source = k.value(args["input"])
    weight, bias = optional(k, args["weight"]), optional(k, args["bias"])
    axis = source.rank - len(args["normalized_shape"])
    rows, width = product(source.dims[:axis]), c_int(product(source.dims[axis:]))
    out = k.new_buffer(node, 0)
    allocate_stats(k, node)
    with k.op(node), k.loops([rows], "m") as (m,):
        base = f"{c_int(m)} * {width}"
        statistics(k, source, base, width, literal(args["eps"], EPS_TYPE))
        with k.block(f"for (int64_t e = 0; e < {width}; ++e)"):
            k.line(f"{out.name}[{base} + e] = ({out.ctype})((({source.name}[{base} + e] - mean) "
                   f"* rstd){affine(weight, bias, 'e')});")  # fmt: skip
        save_stats(k, node, c_int(m))


def channel_loops(source: Buffer) -> tuple[str, str, str]:
    """(batch, channels, inner size) of an (N, C, *) tensor, as C expressions."""
    inner = product(source.dims[2:]) if source.rank > 2 else sympy.Integer(1)
    return c_int(source.dims[0]), c_int(source.dims[1]), c_int(inner)


@lowers(aten._native_batch_norm_legit_no_training.default)
def batch_norm_eval(k: Kernel, node: torch.fx.Node) -> None:
    args = bind_args(node)
    source = k.value(args["input"])
    weight, bias = optional(k, args["weight"]), optional(k, args["bias"])
    mean, var = k.value(args["running_mean"]), k.value(args["running_var"])
    out = k.new_buffer(node, 0)
    batch, channels, inner = channel_loops(source)
    eps = literal(args["eps"], EPS_TYPE)
    with k.op(node), k.block(f"for (int64_t n = 0; n < {batch}; ++n)"):  # noqa: SIM117
        with k.block(f"for (int64_t c = 0; c < {channels}; ++c)"):
            k.line(f"const double rstd = 1.0 / sqrt((double){var.name}[c] + {eps});")
            k.line(f"const int64_t base = (n * {channels} + c) * {inner};")
            with k.block(f"for (int64_t e = 0; e < {inner}; ++e)"):
                k.line(f"{out.name}[base + e] = ({out.ctype})((({source.name}[base + e] - "
                       f"{mean.name}[c]) * rstd){affine(weight, bias, 'c')});")  # fmt: skip


@lowers(aten._native_batch_norm_legit.no_stats)
def batch_norm_batch_stats(k: Kernel, node: torch.fx.Node) -> None:
    """Batch norm with the batch's own statistics per channel (what instance norm becomes)."""
    args = bind_args(node)
    source = k.value(args["input"])
    weight, bias = optional(k, args["weight"]), optional(k, args["bias"])
    out = k.new_buffer(node, 0)
    allocate_stats(k, node)
    batch, channels, inner = channel_loops(source)
    eps = literal(args["eps"], EPS_TYPE)
    count = f"(double)({batch} * {inner})"
    plane = f"(n * {channels} + c) * {inner}"
    every = f"for (int64_t n = 0; n < {batch}; ++n) for (int64_t e = 0; e < {inner}; ++e)"
    with k.op(node), k.block(f"for (int64_t c = 0; c < {channels}; ++c)"):
        k.line("double sum = 0, squares = 0;")
        k.line(f"{every} sum += {source.name}[{plane} + e];")
        k.line(f"const double mean = sum / {count};")
        with k.block(every):
            k.line(f"const double d = {source.name}[{plane} + e] - mean;")
            k.line("squares += d * d;")
        k.line(f"const double rstd = 1.0 / sqrt(squares / {count} + {eps});")
        with k.block(every):
            k.line(f"{out.name}[{plane} + e] = ({out.ctype})((({source.name}[{plane} + e] - mean)"
                   f" * rstd){affine(weight, bias, 'c')});")  # fmt: skip
        save_stats(k, node, "c")


@lowers(aten.native_group_norm.default)
def group_norm(k: Kernel, node: torch.fx.Node) -> None:
    args = bind_args(node)
    source = k.value(args["input"])
    weight, bias = optional(k, args["weight"]), optional(k, args["bias"])
    groups = int(args["group"])
    out = k.new_buffer(node, 0)
    allocate_stats(k, node)
    batch, channels, inner = channel_loops(source)
    per_group = f"({channels} / {groups})"
    with k.op(node), k.block(f"for (int64_t n = 0; n < {batch}; ++n)"):  # noqa: SIM117
        with k.block(f"for (int64_t g = 0; g < {groups}; ++g)"):
            k.line(f"const int64_t base = (n * {groups} + g) * {per_group} * {inner};")
            statistics(k, source, "base", f"{per_group} * {inner}", literal(args["eps"], EPS_TYPE))
            with k.block(f"for (int64_t cg = 0; cg < {per_group}; ++cg)"):
                k.line(f"const int64_t c = g * {per_group} + cg;")
                with k.block(f"for (int64_t e = 0; e < {inner}; ++e)"):
                    at = f"base + cg * {inner} + e"
                    k.line(f"{out.name}[{at}] = ({out.ctype})((({source.name}[{at}] - mean) * "
                           f"rstd){affine(weight, bias, 'c')});")  # fmt: skip
            save_stats(k, node, f"n * {groups} + g")
