import torch


def make_inputs(params, generator):
    batch, m, k, n = params["batch"], params["m"], params["k"], params["n"]
    a = torch.randn(batch, m, k, generator=generator)
    b = torch.randn(batch, k, n, generator=generator)
    return [a, b]


def reference(inputs, params):
    a, b = inputs
    return [torch.bmm(a, b)]
