import torch
import torch.nn as nn


class Model(nn.Module):
    """A dilated 2-D convolution: its window spans dilation * (kernel_size - 1) + 1 = 17
    pixels, so the input must stay at least that large."""

    def __init__(self, channels, kernel_size, dilation):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, dilation=dilation)

    def forward(self, x):
        return self.conv(x)


batch_size = 2
channels = 3
kernel_size = 5
dilation = 4
height = 64
width = 64


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size, dilation]
