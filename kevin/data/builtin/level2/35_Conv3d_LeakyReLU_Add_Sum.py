import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 3D convolution (same padding), then LeakyReLU, then add a constant, then sum over dim 1."""

    def __init__(self, in_channels, out_channels, kernel_size, negative_slope, add_value):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.negative_slope = negative_slope
        self.add_value = add_value

    def forward(self, x):
        x = self.conv(x)
        x = F.leaky_relu(x, negative_slope=self.negative_slope)
        x = x + self.add_value
        x = torch.sum(x, dim=1, keepdim=True)
        return x


batch_size = 16
in_channels = 16
out_channels = 32
depth = 16
height = 32
width = 32
kernel_size = 3
negative_slope = 0.1
add_value = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, negative_slope, add_value]
