"""Starting kernel for the triton target: one program per block of 1024 elements."""

import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.where(x > 0.0, x, 0.0), mask=mask)


def kope_kernel(
    inputs: list[torch.Tensor], outputs: list[torch.Tensor], attrs: list[float]
) -> None:
    (x,) = inputs
    (y,) = outputs
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
