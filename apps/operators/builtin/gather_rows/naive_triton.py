"""Starting kernel for the triton target: a (BLOCK_K, BLOCK_C) tile of the output a program,
each row read from the table row its index names."""

import torch
import triton
import triton.language as tl


@triton.jit
def gather_kernel(
    table_ptr, index_ptr, out_ptr, k, cols, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr
):
    i = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    i_ok = i < k
    mask = i_ok[:, None] & (c[None, :] < cols)
    row = tl.load(index_ptr + i, mask=i_ok, other=0)
    values = tl.load(table_ptr + row[:, None] * cols + c[None, :], mask=mask)
    tl.store(out_ptr + i[:, None].to(tl.int64) * cols + c[None, :], values, mask=mask)


def kope_kernel(
    inputs: list[torch.Tensor], outputs: list[torch.Tensor], attrs: list[float]
) -> None:
    table, index = inputs
    (out,) = outputs
    k, cols = index.numel(), table.shape[1]
    grid = (triton.cdiv(k, 16), triton.cdiv(cols, 128))
    gather_kernel[grid](table, index, out, k, cols, BLOCK_K=16, BLOCK_C=128)
