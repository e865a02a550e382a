import torch


def get_inputs(param, device=None):
    """
    Generate input tensors for the model based on parameters from DataFrame row.
    """
    return [torch.randn(param['rows'], param['cols'], device=device)]


def get_init_inputs(param, device=None):
    return [float(param.get('eps', 1e-6))]
