import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 3D convolution with a cubic kernel (no padding)."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return self.conv(x)


batch_size = 16
in_channels = 16
out_channels = 32
kernel_size = 3
depth = 32
height = 32
width = 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
