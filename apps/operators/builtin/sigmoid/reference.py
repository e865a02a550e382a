import torch


def make_inputs(params, generator):
    n = params["n"]
    spread = params.get("spread", 1.0)
    if spread == 1.0:
        return [torch.randn(n, generator=generator) * 4.0]
    # Uniform over [-spread, spread], with the extremes themselves present.
    x = (torch.rand(n, generator=generator) * 2.0 - 1.0) * spread
    x[0] = spread
    if n > 1:
        x[1] = -spread
    return [x]


def reference(inputs, params):
    (x,) = inputs
    return [torch.sigmoid(x)]
