import torch


def make_inputs(params, generator):
    n = params["n"]
    return [torch.randn(n, generator=generator), torch.randn(n, generator=generator)]


def reference(inputs, params):
    x, y = inputs
    alpha = float(params.get("alpha", 2.0))
    beta = float(params.get("beta", -0.5))
    return [alpha * x + beta * y]
