import torch


def get_inputs(param, device=None):
    """
    Generate input tensors for the model based on parameters from DataFrame row.
    """
    shape = eval(param.get('shape', '[1]'))
    dtype_str = param.get('dtype', 'float16')
    dtype = getattr(torch, dtype_str)

    x1 = torch.rand(shape, device=device, dtype=dtype)
    x2 = torch.rand(shape, device=device, dtype=dtype)

    t1 = float(param.get('t1', 0.3))
    t2 = float(param.get('t2', 0.1))
    t3 = float(param.get('t3', 0.8))

    return x1, x2, t1, t2, t3


def get_init_inputs(param, device=None):
    """
    Extract initialization parameters for the model from DataFrame row.
    No special initialization needed for MulSigmoid.
    """
    return []


from framework.utils import check_precision


def custom_check_precision(param, outputs, outputs_new):
    dtype = getattr(torch, param.get('dtype', 'float16'))
    tolerance = 1e-3 if dtype == torch.float16 else 1e-5
    return check_precision(outputs, outputs_new, max_abs_error=tolerance,
                           max_rel_error=tolerance)
