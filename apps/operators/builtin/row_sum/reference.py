import torch


def make_inputs(params, generator):
    rows, cols = params["rows"], params["cols"]
    x = torch.randn(rows, cols, generator=generator)
    if params.get("mixed", False):
        # Magnitudes spread log-uniformly over 1e-3 .. 1e3, signs mixed.
        exponent = torch.rand(rows, cols, generator=generator) * 6.0 - 3.0
        x = x * torch.pow(10.0, exponent)
    # A large common offset: the running sum grows to ~cols * offset, and each element is then
    # only a few float32 ulps of it, so a float32 running sum rounds every addition one way.
    return [x + params.get("offset", 0.0)]


def reference(inputs, params):
    (x,) = inputs
    return [x.sum(dim=-1)]
