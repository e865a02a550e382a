import torch


def make_inputs(params, generator):
    rows, cols = params["rows"], params["cols"]
    x = torch.randn(rows, cols, generator=generator) + params.get("offset", 0.0)
    weight = 1.0 + 0.5 * torch.randn(cols, generator=generator)
    bias = 0.5 * torch.randn(cols, generator=generator)
    return [x, weight, bias]


def reference(inputs, params):
    x, weight, bias = inputs
    eps = float(params.get("eps", 1e-5))
    return [torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)]
