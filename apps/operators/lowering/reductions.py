"""Reductions over dims (sum, mean, prod, amax/amin, max/min with indices, argmax/argmin,
any/all, var/std, vector norms), softmax/log_softmax and cumulative sums/products.

Each reduction is one loop nest over the kept dims around one over the reduced dims.
Floating accumulators are double, so sums of float32 values round once, at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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
)
from apps.operators.lowering.errors import LoweringError
from apps.operators.lowering.registry import lowers
from apps.operators.lowering.symbolic import c_int, product, row_major_offset

aten = torch.ops.aten


def reduced_dims(dim: Any, rank: int) -> list[int]:
    """The dims a reduction runs over; None or [] means all of them."""
    if dim is None or dim == []:
        return list(range(rank))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % rank for d in dims}) if rank else []


def acc_type(dtype: torch.dtype) -> str:
    return "double" if is_float(dtype) else "int64_t"


@contextmanager
def over_kept(
    k: Kernel, source: Buffer, dims: list[int]
) -> Iterator[tuple[sympy.Expr, list[sympy.Expr]]]:
    """Loops over the kept dims; yields the output offset and the kept index variables."""
    kept = [d for d in range(source.rank) if d not in dims]
    sizes = tuple(source.dims[d] for d in kept)
    with k.loops(list(sizes), "i") as index:
        yield row_major_offset(sizes, index), index


@contextmanager
def over_reduced(
    k: Kernel, source: Buffer, dims: list[int], kept_index: list[sympy.Expr]
) -> Iterator[tuple[str, sympy.Expr]]:
    """Loops over the reduced dims; yields the source element and its index in the reduction."""
    sizes = tuple(source.dims[d] for d in dims)
    with k.loops(list(sizes), "r") as reduced:
        kept_iter, reduced_iter = iter(kept_index), iter(reduced)
        index = [next(reduced_iter) if d in dims else next(kept_iter) for d in range(source.rank)]
        yield source.at(row_major_offset(source.dims, index)), row_major_offset(sizes, reduced)


def simple_reduction(
    k: Kernel,
    node: torch.fx.Node,
    dims: list[int],
    init: str,
    step: str,
    result: str = "acc",
    acc: str | None = None,
) -> None:
    """out = result(acc), where acc starts at `init` and `step` folds in each element `v`."""
    source = k.value(node.args[0])
    out = k.new_buffer(node)
    count = c_int(product([source.dims[d] for d in dims]))
    with k.op(node), over_kept(k, source, dims) as (offset, index):
        k.line(f"{acc or acc_type(source.dtype)} acc = {init};")
        with over_reduced(k, source, dims, index) as (element, _):
            k.line(f"const {source.ctype} v = {element};")
            k.line(step)
        k.line(f"{out.at(offset)} = ({out.ctype})({result.replace('COUNT', count)});")


def extreme_init(dtype: torch.dtype, greater: bool) -> str:
    if is_float(dtype):
        return "-INFINITY" if greater else "INFINITY"
    if dtype in (torch.bool, torch.uint8):
        return "0" if greater else "255"
    return "INT64_MIN" if greater else "INT64_MAX"


def better(dtype: torch.dtype, greater: bool, old: str) -> str:
    """C condition: v replaces the running extreme `old` (NaN wins and then stays)."""
    cmp = ">" if greater else "<"
    nan = f" || (v != v && {old} == {old})" if is_float(dtype) else ""
    return f"v {cmp} {old}{nan}"


@lowers(aten.sum.dim_IntList, aten.sum.default)
def sum_(k: Kernel, node: torch.fx.Node) -> None:
    source = k.value(node.args[0])
    simple_reduction(k, node, reduced_dims(bind_args(node).get("dim"), source.rank), "0",
                     "acc += v;")  # fmt: skip


@lowers(aten.mean.dim, aten.mean.default)
def mean(k: Kernel, node: torch.fx.Node) -> None:
    source = k.value(node.args[0])
    dims = reduced_dims(bind_args(node).get("dim"), source.rank)
    simple_reduction(k, node, dims, "0", "acc += v;", "acc / (double)(COUNT)", "double")


@lowers(aten.prod.dim_int, aten.prod.default)
def prod(k: Kernel, node: torch.fx.Node) -> None:
    source = k.value(node.args[0])
    simple_reduction(k, node, reduced_dims(bind_args(node).get("dim"), source.rank), "1",
                     "acc *= v;")  # fmt: skip


def extreme(greater: bool) -> Any:
    def lower(k: Kernel, node: torch.fx.Node) -> None:
        source = k.value(node.args[0])
        dims = reduced_dims(bind_args(node).get("dim"), source.rank)
        init = extreme_init(source.dtype, greater)
        acc = source.ctype if is_float(source.dtype) else "int64_t"
        step = f"if ({better(source.dtype, greater, 'acc')}) acc = v;"
        simple_reduction(k, node, dims, init, step, acc=acc)

    return lower


lowers(aten.amax.default, aten.max.default)(extreme(True))
lowers(aten.amin.default, aten.min.default)(extreme(False))


def any_all(is_any: bool) -> Any:
    def lower(k: Kernel, node: torch.fx.Node) -> None:
        source = k.value(node.args[0])
        dims = reduced_dims(bind_args(node).get("dim"), source.rank)
        step = "acc = acc || (v != 0);" if is_any else "acc = acc && (v != 0);"
        simple_reduction(k, node, dims, "0" if is_any else "1", step, acc="int")

    return lower


lowers(aten.any.dim, aten.any.dims, aten.any.default)(any_all(True))
lowers(aten.all.dim, aten.all.dims, aten.all.default)(any_all(False))


def indexed_extreme(k: Kernel, node: torch.fx.Node, greater: bool, with_values: bool) -> None:
    """max/min.dim (values and indices) and argmax/argmin: the first extreme's index."""
    args = bind_args(node)
    source = k.value(args["self"])
    dims = reduced_dims(args["dim"], source.rank)
    values = k.new_buffer(node, 0) if with_values and k.tuple_item(node, 0) else None
    if with_values:
        indices = k.new_buffer(node, 1) if k.tuple_item(node, 1) else None
    else:
        indices = k.new_buffer(node)
    with k.op(node), over_kept(k, source, dims) as (offset, index):
        k.line(f"{source.ctype} best = {extreme_init(source.dtype, greater)};")
        if indices is not None:
            k.line("int64_t at = 0;")
        with over_reduced(k, source, dims, index) as (element, position):
            k.line(f"const {source.ctype} v = {element};")
            first = f"{c_int(position)} == 0 || "
            keep = f" at = {c_int(position)};" if indices is not None else ""
            k.line(f"if ({first}{better(source.dtype, greater, 'best')}) {{ best = v;{keep} }}")
        if values is not None:
            k.line(f"{values.at(offset)} = best;")
        if indices is not None:
            k.line(f"{indices.at(offset)} = at;")


lowers(aten.max.dim)(lambda k, node: indexed_extreme(k, node, True, True))
lowers(aten.min.dim)(lambda k, node: indexed_extreme(k, node, False, True))
lowers(aten.argmax.default)(lambda k, node: indexed_extreme(k, node, True, False))
lowers(aten.argmin.default)(lambda k, node: indexed_extreme(k, node, False, False))


def variance(root: bool) -> Any:
    def lower(k: Kernel, node: torch.fx.Node) -> None:
        args = bind_args(node)
        source = k.value(args["self"])
        dims = reduced_dims(args.get("dim"), source.rank)
        correction = args.get("correction")
        correction = 1 if correction is None else correction
        out = k.new_buffer(node)
        count = f"(double)({c_int(product([source.dims[d] for d in dims]))})"
        with k.op(node), over_kept(k, source, dims) as (offset, index):
            k.line("double sum = 0, squares = 0;")
            with over_reduced(k, source, dims, index) as (element, _):
                k.line(f"sum += {element};")
            k.line(f"const double mean = sum / {count};")
            with over_reduced(k, source, dims, index) as (element, _):
                k.line(f"squares += ({element} - mean) * ({element} - mean);")
            k.line(f"double var = squares / ({count} - {literal(correction, torch.float64)});")
            result = "sqrt(var)" if root else "var"
            k.line(f"{out.at(offset)} = ({out.ctype}){result};")

    return lower


lowers(aten.var.correction, aten.var.dim)(variance(False))
lowers(aten.std.correction, aten.std.dim)(variance(True))


@lowers(aten.linalg_vector_norm.default)
def vector_norm(k: Kernel, node: torch.fx.Node) -> None:
    args = bind_args(node)
    source = k.value(args["self"])
    dims = reduced_dims(args.get("dim"), source.rank)
    order = float(args.get("ord", 2))
    if order == float("inf"):
        init, step, result = "0", "if (fabs(v) > acc || v != v) acc = fabs(v);", "acc"
    elif order == float("-inf"):
        init, step, result = "INFINITY", "if (fabs(v) < acc || v != v) acc = fabs(v);", "acc"
    elif order == 0:
        init, step, result = "0", "acc += (v != 0);", "acc"
    elif order == 1:
        init, step, result = "0", "acc += fabs(v);", "acc"
    elif order == 2:
        init, step, result = "0", "acc += (double)v * v;", "sqrt(acc)"
    else:
        p = literal(order, torch.float64)
        init, step, result = "0", f"acc += pow(fabs(v), {p});", f"pow(acc, 1.0 / {p})"
    simple_reduction(k, node, dims, init, step, result, "double")


@contextmanager
def along(k: Kernel, source: Buffer, dim: int) -> Iterator[tuple[str, Any]]:
    """Loops over every line along `dim`; yields (line length, offset of element j)."""
    others = [d for d in range(source.rank) if d != dim]
    with k.loops([source.dims[d] for d in others], "i") as index:

        def offset(j: sympy.Expr) -> sympy.Expr:
            it = iter(index)
            full = [j if d == dim else next(it) for d in range(source.rank)]
            return row_major_offset(source.dims, full)

        yield c_int(source.dims[dim]) if source.rank else "1", offset


def softmax(log: bool) -> Any:
    def lower(k: Kernel, node: torch.fx.Node) -> None:
        source = k.value(node.args[0])
        dim = int(bind_args(node)["dim"]) % max(source.rank, 1)
        out = k.new_buffer(node)
        exp, log_fn = math_fn("exp", out.dtype), math_fn("log", out.dtype)
        j = sympy.Symbol("j", integer=True, nonnegative=True)
        with k.op(node), along(k, source, dim) as (length, offset):
            at = c_int(offset(j))
            loop = f"for (int64_t j = 0; j < {length}; ++j)"
            k.line(f"{source.ctype} top = -INFINITY;")
            k.line(f"{loop} if ({source.name}[{at}] > top) top = {source.name}[{at}];")
            k.line("double sum = 0;")
            k.line(f"{loop} sum += {exp}({source.name}[{at}] - top);")
            if log:
                k.line(f"const {out.ctype} shift = top + ({out.ctype}){log_fn}(sum);")
                k.line(f"{loop} {out.name}[{at}] = {source.name}[{at}] - shift;")
            else:
                k.line(f"const {out.ctype} scale = ({out.ctype})(1.0 / sum);")
                k.line(f"{loop} {out.name}[{at}] = {exp}({source.name}[{at}] - top) * scale;")

    return lower


lowers(aten._softmax.default)(softmax(False))
lowers(aten._log_softmax.default)(softmax(True))


def cumulative(op: str) -> Any:
    def lower(k: Kernel, node: torch.fx.Node) -> None:
        source = k.value(node.args[0])
        dim = int(bind_args(node)["dim"]) % max(source.rank, 1)
        out = k.new_buffer(node)
        if out.dtype not in (torch.float32, torch.float64, torch.int64, torch.int32):
            raise LoweringError(f"{node.target}: dtype {out.dtype} not lowered")
        j = sympy.Symbol("j", integer=True, nonnegative=True)
        with k.op(node), along(k, source, dim) as (length, offset):
            at = c_int(offset(j))
            k.line(f"{acc_type(out.dtype)} acc = {'0' if op == '+' else '1'};")
            with k.block(f"for (int64_t j = 0; j < {length}; ++j)"):
                k.line(f"acc {op}= {source.name}[{at}];")
                k.line(f"{out.name}[{at}] = ({ctype(out.dtype)})acc;")

    return lower


lowers(aten.cumsum.default)(cumulative("+"))
lowers(aten.cumprod.default)(cumulative("*"))
