import torch


def get_inputs(param, device=None):
    """
    Generate input tensors for the model based on parameters from DataFrame row.
    """
    shape = eval(param.get('shape', '[1]'))
    dtype_str = param.get('dtype', 'float16')
    dtype = getattr(torch, dtype_str)

    x = torch.randn(shape, device=device, dtype=dtype)
    return [x]


def get_init_inputs(param, device=None):
    """
    Extract initialization parameters for the model from DataFrame row.
    """
    return []
