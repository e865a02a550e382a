"""Views and data movement: reshapes alias their (contiguous) input; permute, expand, slice,
select, flip, repeat, pad, cat, split, index_select, gather and embedding copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy  # type: ignore[import-untyped]
import torch

from apps.operators.lowering.builder import Buffer, Kernel, bind_args, literal, meta_dims
from apps.operators.lowering.errors import LoweringError
from apps.operators.lowering.registry import lowers
from apps.operators.lowering.symbolic import c_int, loop_var, row_major_offset, to_expr

aten = torch.ops.aten
IndexMap = Callable[[list[sympy.Expr]], list[sympy.Expr]]


@lowers(
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.alias.default,
    aten.clone.default, aten.lift_fresh_copy.default, aten.detach.default,
    aten.squeeze.dims, aten.squeeze.dim, aten.squeeze.default, aten.unsqueeze.default,
    aten.contiguous.default, aten.flatten.using_ints,
)  # fmt: skip
def view(k: Kernel, node: torch.fx.Node) -> None:
    k.alias(node, k.value(node.args[0]))


def copy_indexed(k: Kernel, node: torch.fx.Node, source: Buffer, source_index: IndexMap) -> None:
    """out[index] = source[source_index(index)] over the whole output."""
    out = k.new_buffer(node)
    with k.op(node), k.loops(list(out.dims)) as index:
        src = row_major_offset(source.dims, source_index(index))
        k.line(f"{out.at(row_major_offset(out.dims, index))} = {source.at(src)};")


def dim_of(value: Any, rank: int) -> int:
    return int(value) % max(rank, 1)


@lowers(aten.permute.default)
def permute(k: Kernel, node: torch.fx.Node) -> None:
    source = k.value(node.args[0])
    order = [dim_of(d, source.rank) for d in node.args[1]]  # type: ignore[union-attr]

    def index_map(index: list[sympy.Expr]) -> list[sympy.Expr]:
        result: list[sympy.Expr] = [sympy.Integer(0)] * source.rank
        for out_dim, source_dim in enumerate(order):
            result[source_dim] = index[out_dim]
        return result

    copy_indexed(k, node, source, index_map)


@lowers(aten.t.default, aten.transpose.int)
def transpose(k: Kernel, node: torch.fx.Node) -> None:
    source = k.value(node.args[0])
    a, b = (0, 1) if node.target == aten.t.default else (
        dim_of(node.args[1], source.rank), dim_of(node.args[2], source.rank))  # fmt: skip

    def index_map(index: list[sympy.Expr]) -> list[sympy.Expr]:
        result = list(index)
        result[a], result[b] = index[b], index[a]
        return result

    copy_indexed(k, node, source, index_map)


@lowers(aten.expand.default, aten.expand_copy.default)
def expand(k: Kernel, node: torch.fx.Node) -> None:
    source = k.value(node.args[0])
    rank = len(meta_dims(node))
    lead = rank - source.rank

    def index_map(index: list[sympy.Expr]) -> list[sympy.Expr]:
        return [sympy.Integer(0) if size == 1 else index[lead + d]
                for d, size in enumerate(source.dims)]  # fmt: skip

    copy_indexed(k, node, source, index_map)


def normalized_start(start: Any, size: sympy.Expr) -> sympy.Expr:
    if start is None:
        return sympy.Integer(0)
    expr = to_expr(start)
    if expr.is_number and expr < 0:
        return sympy.Max(size + expr, 0)
    if expr.is_number and (size - expr).is_number and expr > size:
        return size
    return expr


@lowers(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(k: Kernel, node: torch.fx.Node) -> None:
    args = bind_args(node)
    source = k.value(args["self"])
    dim = dim_of(args["dim"], source.rank)
    start = normalized_start(args["start"], source.dims[dim])
    step = to_expr(args["step"] or 1)

    def index_map(index: list[sympy.Expr]) -> list[sympy.Expr]:
        result = list(index)
        result[dim] = start + index[dim] * step
        return result

    if start == 0 and step == 1 and meta_dims(node) == source.dims:
        k.alias(node, source)
        return
    copy_indexed(k, node, source, index_map)


@lowers(aten.select.int, aten.select_copy.int)
def select(k: Kernel, node: torch.fx.Node) -> None:
    source = k.value(node.args[0])
    dim = dim_of(node.args[1], source.rank)
    position = to_expr(node.args[2])
    if position.is_number and position < 0:
        position = source.dims[dim] + position

    def index_map(index: list[sympy.Expr]) -> list[sympy.Expr]:
        return [*index[:dim], position, *index[dim:]]

    copy_indexed(k, node, source, index_map)


@lowers(aten.flip.default)
def flip(k: Kernel, node: torch.fx.Node) -> None:
    source = k.value(node.args[0])
    dims = {dim_of(d, source.rank) for d in node.args[1]}  # type: ignore[union-attr]

    def index_map(index: list[sympy.Expr]) -> list[sympy.Expr]:
        return [source.dims[d] - 1 - i if d in dims else i for d, i in enumerate(index)]

    copy_indexed(k, node, source, index_map)


@lowers(aten.repeat.default)
def repeat(k: Kernel, node: torch.fx.Node) -> None:
    source = k.value(node.args[0])
    lead = len(meta_dims(node)) - source.rank

    def index_map(index: list[sympy.Expr]) -> list[sympy.Expr]:
        return [sympy.Mod(index[lead + d], size) if size != 1 else sympy.Integer(0)
                for d, size in enumerate(source.dims)]  # fmt: skip

    copy_indexed(k, node, source, index_map)


@lowers(aten.diagonal.default, aten.diagonal_copy.default)
def diagonal(k: Kernel, node: torch.fx.Node) -> None:
    args = bind_args(node)
    source = k.value(args["self"])
    offset, d1, d2 = int(args["offset"]), *(dim_of(args[n], source.rank) for n in ("dim1", "dim2"))
    others = [d for d in range(source.rank) if d not in (d1, d2)]

    def index_map(index: list[sympy.Expr]) -> list[sympy.Expr]:
        result: list[sympy.Expr] = [sympy.Integer(0)] * source.rank
        for position, d in enumerate(others):
            result[d] = index[position]
        result[d1] = index[-1] + max(-offset, 0)
        result[d2] = index[-1] + max(offset, 0)
        return result

    copy_indexed(k, node, source, index_map)


@lowers(aten.constant_pad_nd.default)
def constant_pad(k: Kernel, node: torch.fx.Node) -> None:
    args = bind_args(node)
    source = k.value(args["self"])
    pads = [to_expr(p) for p in args["pad"]]
    before = [sympy.Integer(0)] * source.rank
    padded = set()
    for position in range(len(pads) // 2):
        before[source.rank - 1 - position] = pads[2 * position]
        padded.add(source.rank - 1 - position)
    out = k.new_buffer(node)
    fill = literal(args["value"], out.dtype)
    with k.op(node), k.loops(list(out.dims)) as index:
        src = [i - b for i, b in zip(index, before, strict=True)]
        inside = [f"{c_int(src[d])} >= 0 && {c_int(src[d])} < {c_int(source.dims[d])}"
                  for d in sorted(padded)]  # fmt: skip
        condition = " && ".join(f"({c})" for c in inside) or "1"
        value = source.at(row_major_offset(source.dims, src))
        k.line(f"{out.at(row_major_offset(out.dims, index))} = ({condition}) ? {value} : {fill};")


@lowers(aten.cat.default)
def cat(k: Kernel, node: torch.fx.Node) -> None:
    out = k.new_buffer(node)
    dim = dim_of(node.args[1] if len(node.args) > 1 else 0, out.rank)
    start: sympy.Expr = sympy.Integer(0)
    with k.op(node):
        for part_node in node.args[0]:  # type: ignore[union-attr]
            part = k.value(part_node)
            if part.rank != out.rank:  # legacy: 1-d empty tensors are skipped
                continue
            with k.loops(list(part.dims)) as index:
                target = [i + start if d == dim else i for d, i in enumerate(index)]
                k.line(f"{out.at(row_major_offset(out.dims, target))} = "
                       f"{part.at(row_major_offset(part.dims, index))};")  # fmt: skip
            start = start + part.dims[dim]


@lowers(aten.split_with_sizes.default, aten.split.Tensor, aten.split_with_sizes_copy.default)
def split(k: Kernel, node: torch.fx.Node) -> None:
    source = k.value(node.args[0])
    dim = dim_of(node.args[2] if len(node.args) > 2 else 0, source.rank)
    start: sympy.Expr = sympy.Integer(0)
    for position in range(len(node.meta["val"])):
        size = meta_dims(node, position)[dim]
        if k.tuple_item(node, position) is not None:
            out = k.new_buffer(node, position)
            with k.op(node), k.loops(list(out.dims)) as index:
                src = [i + start if d == dim else i for d, i in enumerate(index)]
                k.line(f"{out.at(row_major_offset(out.dims, index))} = "
                       f"{source.at(row_major_offset(source.dims, src))};")  # fmt: skip
        start = start + size


def gathered(k: Kernel, node: torch.fx.Node, source: Buffer, dim: int, index: Buffer) -> None:
    """out[i] = source[i with dim replaced by index[...]] (index_select, gather)."""
    out = k.new_buffer(node)
    j = loop_var("j")
    with k.op(node), k.loops(list(out.dims)) as at:
        if node.target == aten.index_select.default:
            picked = index.at(at[dim])
        else:
            picked = index.at(row_major_offset(index.dims, at))
        k.line(f"int64_t j = (int64_t){picked};")
        k.line(f"if (j < 0) j += {c_int(source.dims[dim])};")
        src = [j if d == dim else i for d, i in enumerate(at)]
        k.line(f"{out.at(row_major_offset(out.dims, at))} = "
               f"{source.at(row_major_offset(source.dims, src))};")  # fmt: skip


@lowers(aten.index_select.default, aten.gather.default)
def index_select(k: Kernel, node: torch.fx.Node) -> None:
    args = bind_args(node)
    source = k.value(args["self"])
    if args.get("sparse_grad"):
        raise LoweringError(f"{node.target}: sparse_grad not lowered")
    gathered(k, node, source, dim_of(args["dim"], source.rank), k.value(args["index"]))


@lowers(aten.embedding.default)
def embedding(k: Kernel, node: torch.fx.Node) -> None:
    weight, indices = k.value(node.args[0]), k.value(node.args[1])
    out = k.new_buffer(node)
    width = c_int(weight.dims[1])
    with k.op(node), k.loops([indices.numel]) as (i,):
        k.line(f"const int64_t row = (int64_t){indices.at(i)};")
        target = f"{out.name}[{c_int(i)} * {width} + e]"
        k.line(
            f"for (int64_t e = 0; e < {width}; ++e) {target} = {weight.name}[row * {width} + e];"
        )
