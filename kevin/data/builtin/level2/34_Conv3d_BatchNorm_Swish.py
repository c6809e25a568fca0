import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 3D convolution (same padding), then batch norm (running statistics), then Swish (x * sigmoid(x))."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.batch_norm = nn.BatchNorm3d(out_channels)
        nn.init.uniform_(self.batch_norm.running_mean, -0.5, 0.5)
        nn.init.uniform_(self.batch_norm.running_var, 0.5, 2.0)
        nn.init.uniform_(self.batch_norm.weight, 0.5, 1.5)
        nn.init.uniform_(self.batch_norm.bias, -0.5, 0.5)

    def forward(self, x):
        x = self.conv(x)
        x = self.batch_norm(x)
        x = x * torch.sigmoid(x)
        return x


batch_size = 16
in_channels = 16
out_channels = 32
depth = 16
height = 32
width = 32
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
