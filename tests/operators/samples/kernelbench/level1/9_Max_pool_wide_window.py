import torch
import torch.nn as nn


class Model(nn.Module):
    """2-D max pooling with a 7-wide window: the input must stay at least as wide."""

    def __init__(self, kernel_size):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size)

    def forward(self, x):
        return self.pool(x)


batch_size = 4
channels = 3
height = 16
width = 16
kernel_size = 7


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size]
