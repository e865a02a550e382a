import torch


def make_inputs(params, generator):
    batch, classes = params["batch"], params["classes"]
    logits = torch.randn(batch, classes, generator=generator) * params.get("spread", 1.0)
    logits = logits + params.get("offset", 0.0)
    target = torch.randint(0, classes, (batch,), generator=generator, dtype=torch.int64)
    return [logits, target]


def reference(inputs, params):
    logits, target = inputs
    return [torch.nn.functional.cross_entropy(logits, target)]
