import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 2D convolution (same padding), then group norm, then Swish (x * sigmoid(x)), then scale by a constant."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups, scale_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)
        self.scale_factor = scale_factor

    def forward(self, x):
        x = self.conv(x)
        x = self.group_norm(x)
        x = x * torch.sigmoid(x)
        x = x * self.scale_factor
        return x


batch_size = 32
in_channels = 64
out_channels = 128
height = 64
width = 64
kernel_size = 3
num_groups = 8
scale_factor = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups, scale_factor]
