"""A KernelBench model's parameters as kernel inputs: the reference computes with the tensors
it is given, at the cost of its forward alone (apps/operators/reference_loading.py)."""

from __future__ import annotations

import torch

from apps.operators.reference_loading import load_kernelbench

PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        Model.modes_seen = torch._C._len_torch_function_stack()
        return self.linear(x)

features = 8

def get_inputs():
    return [torch.randn(4, features)]

def get_init_inputs():
    return [features]
"""
PARAMS: dict[str, object] = {}


def test_the_reference_computes_with_the_weights_it_is_given() -> None:
    reference = load_kernelbench({"problem": PROBLEM})
    x, weight, bias = reference.make_inputs(PARAMS, torch.Generator().manual_seed(1))
    other_weight = torch.randn_like(weight)

    first = reference.compute([x, weight, bias], PARAMS)[0]
    second = reference.compute([x, other_weight, bias], PARAMS)[0]

    assert torch.allclose(first, x @ weight.T + bias, atol=1e-6)
    assert torch.allclose(second, x @ other_weight.T + bias, atol=1e-6)


def test_a_draw_after_a_call_gets_the_weights_as_built_not_the_ones_last_given() -> None:
    reference = load_kernelbench({"problem": PROBLEM})
    x, weight, bias = reference.make_inputs(PARAMS, torch.Generator().manual_seed(1))
    reference.compute([x, torch.zeros_like(weight), bias], PARAMS)

    _, weight_again, _ = reference.make_inputs(PARAMS, torch.Generator().manual_seed(2))

    assert torch.equal(weight_again, weight)


def test_a_call_copies_no_weight_and_runs_under_no_torch_function_mode() -> None:
    """PyTorch eager's time is the model's forward: no copy or swap of its parameters per
    call, and a problem that never names a GPU pays nothing for the mode that moves one."""
    reference = load_kernelbench({"problem": PROBLEM})
    x, weight, bias = reference.make_inputs(PARAMS, torch.Generator().manual_seed(1))
    weight_ptr = weight.data_ptr()

    reference.compute([x, weight, bias], PARAMS)
    reference.compute([x, weight, bias], PARAMS)

    model = reference.model(PARAMS).model.model  # FlatInputs -> StateAsInputs -> Model
    assert model.linear.weight.data_ptr() == weight_ptr
    assert type(model).modes_seen == 0
    gpu_written = PROBLEM.replace("torch.randn(4, features)", "torch.randn(4, features).cuda()")
    gpu_reference = load_kernelbench({"problem": gpu_written})
    inputs = gpu_reference.make_inputs(PARAMS, torch.Generator().manual_seed(1))
    gpu_reference.compute(list(inputs), PARAMS)
    assert type(gpu_reference.model(PARAMS).model.model).modes_seen == 1
