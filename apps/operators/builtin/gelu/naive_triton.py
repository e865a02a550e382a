"""Starting kernel for the triton target: exact GELU, 0.5 * x * (1 + erf(x / sqrt(2)))."""

import torch
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offsets, y, mask=mask)


def kope_kernel(
    inputs: list[torch.Tensor], outputs: list[torch.Tensor], attrs: list[float]
) -> None:
    (x,) = inputs
    (y,) = outputs
    n = x.numel()
    gelu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
