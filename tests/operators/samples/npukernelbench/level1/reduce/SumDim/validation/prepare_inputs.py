import torch


def get_inputs(param, device=None):
    return [torch.randn(param["shape"]), param["dim"]]


def get_init_inputs(param, device=None):
    return []


def custom_check_precision(param, outputs, outputs_new):
    # Sums of many float32 values: compare relative to the row's magnitude.
    for expected, actual in zip(outputs, outputs_new):
        if not torch.allclose(expected, actual, rtol=1e-4, atol=1e-3 * param["shape"][-1]):
            return False
    return True
