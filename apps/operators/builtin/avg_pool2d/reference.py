import torch


def make_inputs(params, generator):
    shape = (params["n"], params["c"], params["h"], params["w"])
    return [torch.randn(*shape, generator=generator)]


def reference(inputs, params):
    (x,) = inputs
    kernel = int(params.get("kernel", 2))
    stride = int(params.get("stride", 2))
    y = torch.nn.functional.avg_pool2d(x, kernel, stride)
    # the case's oh/ow must match what the pooling produces
    assert tuple(y.shape[-2:]) == (params["oh"], params["ow"]), (tuple(y.shape), params)
    return [y]
