"""Matrix products: mm, bmm, addmm, baddbmm, mv, dot. A product is the textbook i-j-p nest
with one accumulator per output element, the form the offline policy's GEMM strategies
recognise (the policy does the optimizing, as for every lowered op)."""

from __future__ import annotations

from contextlib import nullcontext

import torch

from apps.operators.lowering.builder import Buffer, Kernel, bind_args, literal
from apps.operators.lowering.elementwise import broadcast_offset
from apps.operators.lowering.errors import LoweringError
from apps.operators.lowering.registry import lowers
from apps.operators.lowering.symbolic import c_int, row_major_offset

aten = torch.ops.aten


def matmul(
    k: Kernel, out: Buffer, a: Buffer, b: Buffer, batched: bool, alpha: str | None = None
) -> None:
    """out[(batch,) i, j] = alpha * sum_k a[(batch,) i, k] * b[(batch,) k, j]."""
    if a.dtype != b.dtype or a.dtype != out.dtype:
        raise LoweringError(f"matrix product of {a.dtype} and {b.dtype}: not lowered")
    rows, inner, cols = (c_int(d) for d in (a.dims[-2], a.dims[-1], b.dims[-1]))
    scale = f"{alpha} * " if alpha else ""
    header = f"for (int64_t n = 0; n < {c_int(a.dims[0])}; ++n)"
    with k.block(header) if batched else nullcontext():

        def start(name: str, size: str) -> str:
            return f"{name} + n * {size}" if batched else name

        k.line(f"const {a.ctype} *A = {start(a.name, f'{rows} * {inner}')};")
        k.line(f"const {b.ctype} *B = {start(b.name, f'{inner} * {cols}')};")
        k.line(f"{out.ctype} *C = {start(out.name, f'{rows} * {cols}')};")
        rows_loop = f"for (int64_t i = 0; i < {rows}; ++i)"
        with k.block(rows_loop), k.block(f"for (int64_t j = 0; j < {cols}; ++j)"):
            k.line(f"{out.ctype} acc = 0;")
            k.line(f"for (int64_t p = 0; p < {inner}; ++p) "
                   f"acc += A[i * {inner} + p] * B[p * {cols} + j];")  # fmt: skip
            k.line(f"C[i * {cols} + j] = {scale}acc;")


def add_bias(k: Kernel, out: Buffer, bias: Buffer, beta: str | None) -> None:
    """out += beta * bias, bias broadcast to out's shape."""
    with k.loops(list(out.dims), "i") as index:
        offset = broadcast_offset(bias, out.dims, index)
        scaled = f"{beta} * {bias.at(offset)}" if beta else bias.at(offset)
        k.line(f"{out.at(row_major_offset(out.dims, index))} += {scaled};")


def factor(value: object, dtype: torch.dtype) -> str | None:
    return None if value == 1 else literal(value, dtype)


@lowers(aten.mm.default, aten.bmm.default)
def mm(k: Kernel, node: torch.fx.Node) -> None:
    a, b = k.value(node.args[0]), k.value(node.args[1])
    out = k.new_buffer(node)
    with k.op(node):
        matmul(k, out, a, b, node.target == aten.bmm.default)


@lowers(aten.addmm.default, aten.baddbmm.default)
def addmm(k: Kernel, node: torch.fx.Node) -> None:
    args = bind_args(node)
    bias = k.value(args["self"])
    a, b = k.value(node.args[1]), k.value(node.args[2])
    out = k.new_buffer(node)
    beta, alpha = factor(args["beta"], out.dtype), factor(args["alpha"], out.dtype)
    with k.op(node):
        matmul(k, out, a, b, node.target == aten.baddbmm.default, alpha)
        if args["beta"] != 0:
            add_bias(k, out, bias, beta)


@lowers(aten.mv.default, aten.dot.default)
def mv(k: Kernel, node: torch.fx.Node) -> None:
    a, x = k.value(node.args[0]), k.value(node.args[1])
    out = k.new_buffer(node)
    rows = c_int(a.dims[0]) if a.rank == 2 else "1"
    inner = c_int(a.dims[-1])
    with k.op(node), k.block(f"for (int64_t i = 0; i < {rows}; ++i)"):
        k.line("double acc = 0;")
        k.line(f"for (int64_t p = 0; p < {inner}; ++p) acc += (double){a.name}[i * {inner} + p]"
               f" * {x.name}[p];")  # fmt: skip
        k.line(f"{out.name}[i] = ({out.ctype})acc;")
