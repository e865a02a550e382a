import math

import torch


def make_inputs(params, generator):
    b, h, sq, skv, d = params["b"], params["h"], params["sq"], params["skv"], params["d"]
    q = torch.randn(b, h, sq, d, generator=generator) * params.get("spread", 1.0)
    k = torch.randn(b, h, skv, d, generator=generator)
    v = torch.randn(b, h, skv, d, generator=generator)
    return [q, k, v]


def reference(inputs, params):
    q, k, v = inputs
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-1, -2)) * scale
    return [torch.softmax(scores, dim=-1) @ v]
