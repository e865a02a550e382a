import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def get_inputs(param, device=None):
    x = torch.randn(param["shape"], dtype=DTYPES[param["dtype"]])
    return [x.to(device) if device else x]


def get_init_inputs(param, device=None):
    return []
