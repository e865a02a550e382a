import torch


def make_inputs(params, generator):
    rows, cols = params["rows"], params["cols"]
    a = torch.randn(rows, cols, generator=generator) * params.get("spread", 3.0)
    b = torch.randn(rows, cols, generator=generator)
    return [a, b]


def reference(inputs, params):
    a, b = inputs
    return [torch.nn.functional.silu(a) * b]
