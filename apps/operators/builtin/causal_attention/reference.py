import math

import torch


def make_inputs(params, generator):
    b, h, s, d = params["b"], params["h"], params["s"], params["d"]
    q = torch.randn(b, h, s, d, generator=generator) * params.get("spread", 1.0)
    k = torch.randn(b, h, s, d, generator=generator)
    v = torch.randn(b, h, s, d, generator=generator)
    return [q, k, v]


def reference(inputs, params):
    q, k, v = inputs
    s = q.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-1, -2)) * scale
    # query i sees keys j <= i: mask out the strict upper triangle explicitly
    future = torch.ones(s, s, dtype=torch.bool).triu(diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    return [torch.softmax(scores, dim=-1) @ v]
