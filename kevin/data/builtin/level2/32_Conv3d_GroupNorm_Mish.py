import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 3D convolution (same padding), then group norm, then Mish."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = self.group_norm(x)
        x = F.mish(x)
        return x


batch_size = 16
in_channels = 16
out_channels = 32
depth = 16
height = 32
width = 32
kernel_size = 3
num_groups = 4


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
