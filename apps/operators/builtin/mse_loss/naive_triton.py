"""Starting kernel for the triton target: each program sums its block's squared differences in
float64 into a partial sum; a second one-program kernel adds the partials and divides by n."""

import torch
import triton
import triton.language as tl


@triton.jit
def partial_kernel(pred_ptr, target_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    p = tl.load(pred_ptr + offsets, mask=mask, other=0.0).to(tl.float64)
    t = tl.load(target_ptr + offsets, mask=mask, other=0.0).to(tl.float64)
    d = p - t
    tl.store(partial_ptr + tl.program_id(0), tl.sum(d * d, axis=0))


@triton.jit
def finish_kernel(partial_ptr, loss_ptr, blocks, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float64)
    for start in range(0, blocks, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        acc += tl.load(partial_ptr + offsets, mask=offsets < blocks, other=0.0)
    tl.store(loss_ptr, (tl.sum(acc, axis=0) / n).to(tl.float32))


def kope_kernel(
    inputs: list[torch.Tensor], outputs: list[torch.Tensor], attrs: list[float]
) -> None:
    pred, target = inputs
    (loss,) = outputs
    n = pred.numel()
    blocks = triton.cdiv(n, 4096)
    partial = torch.empty(blocks, dtype=torch.float64, device=pred.device)
    partial_kernel[(blocks,)](pred, target, partial, n, BLOCK=4096)
    finish_kernel[(1,)](partial, loss, blocks, n, BLOCK=1024)
