import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A depthwise 2D convolution: one 3x3 filter per channel (groups = channels), same padding."""

    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x):
        return self.conv(x)


batch_size = 16
channels = 128
kernel_size = 3
height = 256
width = 256


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size]
