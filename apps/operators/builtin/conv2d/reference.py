import torch


def make_inputs(params, generator):
    n, c, h, w = params["n"], params["c"], params["h"], params["w"]
    k, r, s = params["k"], params["r"], params["s"]
    x = torch.randn(n, c, h, w, generator=generator)
    # weights scaled by 1/sqrt(fan_in), as a trained layer's would be: outputs of order 1
    weight = torch.randn(k, c, r, s, generator=generator) / (c * r * s) ** 0.5
    bias = torch.randn(k, generator=generator)
    return [x, weight, bias]


def reference(inputs, params):
    x, weight, bias = inputs
    stride = int(params.get("stride", 1))
    padding = int(params.get("padding", 0))
    y = torch.nn.functional.conv2d(x, weight, bias, stride=stride, padding=padding)
    # the case's oh/ow must match what the convolution produces
    assert tuple(y.shape[-2:]) == (params["oh"], params["ow"]), (tuple(y.shape), params)
    return [y]
