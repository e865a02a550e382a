"""Starting kernel for the triton target: 1 / (1 + exp(-x)); exp overflows to inf, giving 0."""

import torch
import triton
import triton.language as tl


@triton.jit
def sigmoid_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, 1.0 / (1.0 + tl.exp(-x)), mask=mask)


def kope_kernel(
    inputs: list[torch.Tensor], outputs: list[torch.Tensor], attrs: list[float]
) -> None:
    (x,) = inputs
    (y,) = outputs
    n = x.numel()
    sigmoid_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
