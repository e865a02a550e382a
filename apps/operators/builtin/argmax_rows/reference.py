import torch


def make_inputs(params, generator):
    rows, cols = params["rows"], params["cols"]
    levels = params.get("levels")
    if levels:
        # Small integers as floats: many ties for the row maximum. Each row gets its own
        # offset, so with levels = 1 every row is constant but the matrix is not.
        x = torch.randint(0, levels, (rows, cols), generator=generator)
        x = x + torch.randint(-50, 50, (rows, 1), generator=generator)
        return [x.to(torch.float32)]
    x = torch.randn(rows, cols, generator=generator) * params.get("spread", 1.0)
    return [x + params.get("offset", 0.0)]


def reference(inputs, params):
    (x,) = inputs
    return [torch.argmax(x, dim=-1)]
