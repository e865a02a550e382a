import torch
import torch.nn as nn


class Model(nn.Module):
    """Hinge loss, mean(clamp(1 - predictions * targets, min=0)); the targets broadcast over
    the predictions' last dimension, which is as long as the batch."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


batch_size = 64
input_shape = (64,)
dim = 1


def get_inputs():
    return [
        torch.randn(batch_size, *input_shape),
        torch.randint(0, 2, (batch_size,)).float() * 2 - 1,
    ]


def get_init_inputs():
    return []
