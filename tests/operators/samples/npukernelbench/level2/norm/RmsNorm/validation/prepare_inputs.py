import torch


def get_inputs(param, device=None):
    return [torch.randn(param["rows"], param["cols"])]


def get_init_inputs(param, device=None):
    return [param["eps"]]
