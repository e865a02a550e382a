import torch
from framework.utils import check_precision


def get_inputs(param, device=None):
    """
    Generate input tensors for the model based on parameters from DataFrame row.
    """
    input_shape = eval(param.get('input_shape', '[1]'))
    real_part = torch.rand(input_shape, dtype=torch.float32, device=device)
    if not param.get('complex_input', False):
        return [real_part]
    imag_part = torch.rand(input_shape, dtype=torch.float32, device=device)
    return [torch.complex(real_part, imag_part)]


def get_init_inputs(param, device=None):
    return []


def custom_check_precision(param, outputs, outputs_new):
    return check_precision(outputs, outputs_new, max_abs_error=1e-4, max_rel_error=1e-4)
