import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 2D convolution (same padding), then instance norm, then divide by a constant."""

    def __init__(self, in_channels, out_channels, kernel_size, divisor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.instance_norm = nn.InstanceNorm2d(out_channels)
        self.divisor = divisor

    def forward(self, x):
        x = self.conv(x)
        x = self.instance_norm(x)
        x = x / self.divisor
        return x


batch_size = 32
in_channels = 64
out_channels = 128
height = 64
width = 64
kernel_size = 3
divisor = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, divisor]
