import torch


def make_inputs(params, generator):
    rows, cols = params["rows"], params["cols"]
    x = torch.randn(rows, cols, generator=generator)
    residual = torch.randn(rows, cols, generator=generator)
    weight = 1.0 + 0.5 * torch.randn(cols, generator=generator)
    return [x, residual, weight]


def reference(inputs, params):
    x, residual, weight = inputs
    eps = float(params.get("eps", 1e-6))
    h = x + residual
    return [torch.nn.functional.rms_norm(h, (h.shape[-1],), weight, eps)]
