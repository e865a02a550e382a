import torch


def make_inputs(params, generator):
    n = params["n"]
    spread = params.get("spread", 1.0)
    pred = torch.randn(n, generator=generator) * spread
    noise = params.get("noise")
    if noise:
        # target close to pred: small differences, the loss is around noise**2
        target = pred + torch.randn(n, generator=generator) * noise
    else:
        target = torch.randn(n, generator=generator) * spread
    return [pred, target]


def reference(inputs, params):
    pred, target = inputs
    return [torch.nn.functional.mse_loss(pred, target)]
