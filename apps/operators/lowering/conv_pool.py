"""Convolution (1d/2d/3d, strided, padded, dilated, grouped, transposed) as direct loops,
and pooling: max (with indices), average, adaptive average and adaptive max."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy  # type: ignore[import-untyped]
import torch
from torch.utils._sympy.functions import FloorDiv

from apps.operators.lowering.builder import Buffer, Kernel, bind_args, is_float, literal
from apps.operators.lowering.errors import LoweringError
from apps.operators.lowering.registry import lowers
from apps.operators.lowering.symbolic import c_int, loop_var, product, row_major_offset

aten = torch.ops.aten


def per_dim(values: Any, count: int, default: int | None = None) -> list[int]:
    """A size/stride/padding argument as one int per spatial dim ([] or [v] broadcast)."""
    items = list(values) if isinstance(values, (list, tuple)) else [values]
    if not items and default is not None:
        items = [default]
    if len(items) == 1:
        items = items * count
    if len(items) != count or not all(isinstance(v, int) for v in items):
        raise LoweringError(f"window argument {values!r}: not lowered (symbolic or mismatched)")
    return [int(v) for v in items]


def symbols(prefix: str, count: int) -> list[sympy.Expr]:
    return [loop_var(f"{prefix}{d}") for d in range(count)]


def open_loops(k: Kernel, names: Sequence[str], sizes: Sequence[Any]) -> list[Any]:
    """Opens `for` loops; the caller closes them with close_loops(k, len)."""
    for name, size in zip(names, sizes, strict=True):
        bound = c_int(size) if isinstance(size, sympy.Basic) else str(size)
        k.line(f"for (int64_t {name} = 0; {name} < {bound}; ++{name}) {{")
        k._depth += 1
    return list(names)


def close_loops(k: Kernel, count: int) -> None:
    for _ in range(count):
        k._depth -= 1
        k.line("}")


@lowers(aten.convolution.default)
def convolution(k: Kernel, node: torch.fx.Node) -> None:
    args = bind_args(node)
    x, w = k.value(args["input"]), k.value(args["weight"])
    bias = k.value(args["bias"]) if isinstance(args["bias"], torch.fx.Node) else None
    nd = x.rank - 2
    if nd < 1 or nd > 3:
        raise LoweringError(f"{node.target}: {nd}-d convolution not lowered")
    stride, padding, dilation = (per_dim(args[a], nd) for a in ("stride", "padding", "dilation"))
    groups, transposed = int(args["groups"]), bool(args["transposed"])
    out = k.new_buffer(node)
    o, kk, xs = symbols("o", nd), symbols("k", nd), symbols("x", nd)
    n, ic = loop_var("n"), loop_var("ic")
    in_per_group, out_per_group = (FloorDiv(dim, groups) for dim in (x.dims[1], out.dims[1]))
    # One output channel of a group per row: `for n { for g { for ocg { for o.. { acc = init;
    # for icg { for k.. { guards; acc += X * W; } } out = acc; } } } }`, the windowed
    # reduction the offline policy's im2col_gemm recognises. A group's row index is ocg, so
    # oc is spelled out where it is read rather than declared between the loops.
    oc = loop_var("g") * out_per_group + loop_var("ocg")
    accumulator = out.ctype if out.ctype in ("float", "double") else "double"
    init = bias.at(oc) if bias is not None else "0"
    with k.op(node):
        open_loops(k, ["n", "g", "ocg"], [out.dims[0], groups, out_per_group])
        open_loops(k, [str(s) for s in o], out.dims[2:])
        k.line(f"{accumulator} acc = {init};")
        open_loops(k, ["icg"], [in_per_group])
        k.line(f"const int64_t ic = g * {c_int(in_per_group)} + icg;")
        open_loops(k, [str(s) for s in kk], w.dims[2:])
        for d in range(nd):
            window_tap(k, d, stride[d], padding[d], dilation[d], x.dims[2 + d], transposed)
        x_at = row_major_offset(x.dims, [n, ic, *xs])
        if transposed:  # weight is (C_in, C_out / groups, *kernel); ic spelled out, as
            # the weight reads only the row, the window and what is fixed around them
            group_input = loop_var("g") * in_per_group + loop_var("icg")
            w_at = row_major_offset(w.dims, [group_input, loop_var("ocg"), *kk])
        else:  # weight is (C_out, C_in / groups, *kernel)
            w_at = row_major_offset(w.dims, [oc, loop_var("icg"), *kk])
        widen = "" if accumulator == x.ctype else f"({accumulator})"
        k.line(f"acc += {widen}{x.at(x_at)} * {w.at(w_at)};")
        close_loops(k, nd + 1)
        k.line(f"{out.at(row_major_offset(out.dims, [n, oc, *o]))} = ({out.ctype})acc;")
        close_loops(k, nd + 3)


def window_tap(k: Kernel, d: int, stride: int, padding: int, dilation: int, size: Any,
               transposed: bool) -> None:  # fmt: skip
    """x{d}, the input position output position o{d} reads at tap k{d}, and the guard that
    skips a tap outside the input (or, transposed, between strides)."""
    tap = f"o{d} + {padding} - k{d} * {dilation}"
    if transposed:
        k.line(f"const int64_t t{d} = {tap};")
        k.line(f"if (t{d} < 0 || t{d} % {stride} != 0) continue;")
        k.line(f"const int64_t x{d} = t{d} / {stride};")
    else:
        k.line(f"const int64_t x{d} = o{d} * {stride} - {padding} + k{d} * {dilation};")
    k.line(f"if (x{d} < 0 || x{d} >= {c_int(size)}) continue;")


def planes(source: Buffer, nd: int) -> sympy.Expr:
    """How many independent spatial planes (all leading dims together) a pool runs over."""
    return product(list(source.dims[:-nd]))


def pool_loops(k: Kernel, source: Buffer, out: Buffer, nd: int) -> list[sympy.Expr]:
    open_loops(k, ["p"], [planes(source, nd)])
    o = symbols("o", nd)
    open_loops(k, [str(s) for s in o], out.dims[-nd:])
    return o


def plane_offset(buffer: Buffer, nd: int, index: list[sympy.Expr]) -> sympy.Expr:
    return loop_var("p") * product(list(buffer.dims[-nd:])) + row_major_offset(
        buffer.dims[-nd:], index
    )


def max_pool(k: Kernel, node: torch.fx.Node, nd: int) -> None:
    args = bind_args(node)
    source = k.value(args["self"])
    kernel = per_dim(args["kernel_size"], nd)
    stride = per_dim(args["stride"], nd, kernel[0]) if args["stride"] else kernel
    padding, dilation = per_dim(args["padding"], nd), per_dim(args["dilation"], nd)
    values = k.new_buffer(node, 0) if k.tuple_item(node, 0) else None
    indices = k.new_buffer(node, 1) if k.tuple_item(node, 1) else None
    windows = [(f"o{d} * {stride[d]} - {padding[d]}", kernel[d], dilation[d]) for d in range(nd)]
    reduce_window(k, node, source, values or indices, values, indices, nd, windows)  # type: ignore[arg-type]


def reduce_window(
    k: Kernel,
    node: torch.fx.Node,
    source: Buffer,
    shape: Buffer,
    values: Buffer | None,
    indices: Buffer | None,
    nd: int,
    windows: list[tuple[str, Any, int]],
) -> None:
    """Max over each window (start, size, dilation per dim), with the argmax's plane index."""
    with k.op(node):
        o = pool_loops(k, source, shape, nd)
        start_max(k, source)
        open_loops(k, [f"k{d}" for d in range(nd)], [w[1] for w in windows])
        for d, (start, _, dilation) in enumerate(windows):
            k.line(f"const int64_t x{d} = {start} + k{d} * {dilation};")
            k.line(f"if (x{d} < 0 || x{d} >= {c_int(source.dims[-nd + d])}) continue;")
        keep_max(k, source, nd)
        close_loops(k, nd)
        store_max(k, values, indices, nd, o)
        close_loops(k, nd + 1)


def start_max(k: Kernel, source: Buffer) -> None:
    k.line(f"{source.ctype} best = {'-INFINITY' if is_float(source.dtype) else 'INT64_MIN'};")
    k.line("int64_t at = -1;")


def keep_max(k: Kernel, source: Buffer, nd: int) -> None:
    """At window position x0..x{nd-1}: the largest value so far (NaN wins, as in PyTorch) and
    its index in the plane."""
    xs = symbols("x", nd)
    k.line(f"const {source.ctype} v = {source.at(plane_offset(source, nd, xs))};")
    position = c_int(row_major_offset(source.dims[-nd:], xs))
    nan = " || v != v" if is_float(source.dtype) else ""
    k.line(f"if (at < 0 || v > best{nan}) {{ best = v; at = {position}; }}")


def store_max(k: Kernel, values: Buffer | None, indices: Buffer | None, nd: int,
              o: list[sympy.Expr]) -> None:  # fmt: skip
    if values is not None:
        k.line(f"{values.at(plane_offset(values, nd, o))} = best;")
    if indices is not None:
        k.line(f"{indices.at(plane_offset(indices, nd, o))} = at;")


def sum_window(k: Kernel, source: Buffer, nd: int) -> None:
    """acc: the sum over x{d} from start{d} to end{d} in every dim."""
    k.line("double acc = 0;")
    for d in range(nd):
        k.line(f"for (int64_t x{d} = start{d}; x{d} < end{d}; ++x{d})")
    k.line(f"    acc += {source.at(plane_offset(source, nd, symbols('x', nd)))};")


lowers(aten.max_pool2d_with_indices.default)(lambda k, node: max_pool(k, node, 2))
lowers(aten.max_pool3d_with_indices.default)(lambda k, node: max_pool(k, node, 3))


def avg_pool(k: Kernel, node: torch.fx.Node, nd: int) -> None:
    args = bind_args(node)
    source = k.value(args["self"])
    kernel = per_dim(args["kernel_size"], nd)
    stride = per_dim(args["stride"], nd) if args["stride"] else kernel
    padding = per_dim(args["padding"], nd)
    out = k.new_buffer(node)
    with k.op(node):
        o = pool_loops(k, source, out, nd)
        k.line("int64_t window = 1, inside = 1;")
        for d in range(nd):
            size = c_int(source.dims[-nd + d])
            k.line(f"int64_t start{d} = o{d} * {stride[d]} - {padding[d]};")
            k.line(f"int64_t end{d} = kope_min(start{d} + {kernel[d]}, {size} + {padding[d]});")
            k.line(f"window *= end{d} - start{d};")
            k.line(f"start{d} = kope_max(start{d}, 0);")
            k.line(f"end{d} = kope_min(end{d}, {size});")
            k.line(f"inside *= end{d} - start{d};")
        sum_window(k, source, nd)
        if args.get("divisor_override"):
            divisor = literal(args["divisor_override"], torch.float64)
        else:
            divisor = "window" if args["count_include_pad"] else "inside"
        k.line(f"{out.at(plane_offset(out, nd, o))} = ({out.ctype})(acc / (double){divisor});")
        close_loops(k, nd + 1)


lowers(aten.avg_pool2d.default)(lambda k, node: avg_pool(k, node, 2))
lowers(aten.avg_pool3d.default)(lambda k, node: avg_pool(k, node, 3))


def adaptive_bounds(k: Kernel, source: Buffer, out: Buffer, nd: int) -> None:
    """start_d/end_d of each adaptive window: floor(o*In/Out) to ceil((o+1)*In/Out)."""
    for d in range(nd):
        size, count = c_int(source.dims[-nd + d]), c_int(out.dims[-nd + d])
        k.line(f"const int64_t start{d} = (o{d} * {size}) / {count};")
        k.line(f"const int64_t end{d} = ((o{d} + 1) * {size} + {count} - 1) / {count};")


def adaptive_avg_pool(k: Kernel, node: torch.fx.Node, nd: int) -> None:
    source = k.value(node.args[0])
    out = k.new_buffer(node)
    with k.op(node):
        o = pool_loops(k, source, out, nd)
        adaptive_bounds(k, source, out, nd)
        sum_window(k, source, nd)
        count = " * ".join(f"(end{d} - start{d})" for d in range(nd))
        k.line(f"{out.at(plane_offset(out, nd, o))} = ({out.ctype})(acc / (double)({count}));")
        close_loops(k, nd + 1)


lowers(aten._adaptive_avg_pool2d.default)(lambda k, node: adaptive_avg_pool(k, node, 2))
lowers(aten._adaptive_avg_pool3d.default)(lambda k, node: adaptive_avg_pool(k, node, 3))


def adaptive_max_pool(k: Kernel, node: torch.fx.Node, nd: int) -> None:
    source = k.value(node.args[0])
    values = k.new_buffer(node, 0) if k.tuple_item(node, 0) else None
    indices = k.new_buffer(node, 1) if k.tuple_item(node, 1) else None
    shape = values or indices
    assert shape is not None
    with k.op(node):
        o = pool_loops(k, source, shape, nd)
        adaptive_bounds(k, source, shape, nd)
        start_max(k, source)
        for d in range(nd):
            k.line(f"for (int64_t x{d} = start{d}; x{d} < end{d}; ++x{d})")
        with k.block(""):
            keep_max(k, source, nd)
        store_max(k, values, indices, nd, o)
        close_loops(k, nd + 1)


lowers(aten.adaptive_max_pool2d.default)(lambda k, node: adaptive_max_pool(k, node, 2))
lowers(aten.adaptive_max_pool3d.default)(lambda k, node: adaptive_max_pool(k, node, 3))
