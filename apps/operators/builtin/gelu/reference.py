import torch


def make_inputs(params, generator):
    x = torch.randn(params["n"], generator=generator)
    return [x * params.get("spread", 1.0)]


def reference(inputs, params):
    (x,) = inputs
    return [torch.nn.functional.gelu(x)]
