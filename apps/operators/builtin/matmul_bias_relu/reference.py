import torch


def make_inputs(params, generator):
    m, k, n = params["m"], params["k"], params["n"]
    x = torch.randn(m, k, generator=generator)
    w = torch.randn(k, n, generator=generator)
    # a bias of the same order as the products, so that ReLU cuts a varying share of each column
    bias = torch.randn(n, generator=generator) * (k**0.5)
    return [x, w, bias]


def reference(inputs, params):
    x, w, bias = inputs
    return [torch.relu(x @ w + bias)]
