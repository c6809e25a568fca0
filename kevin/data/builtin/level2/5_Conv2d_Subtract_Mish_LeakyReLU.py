import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 2D convolution (same padding), then subtract a constant, then Mish, then LeakyReLU."""

    def __init__(self, in_channels, out_channels, kernel_size, subtract_value, negative_slope):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.subtract_value = subtract_value
        self.negative_slope = negative_slope

    def forward(self, x):
        x = self.conv(x)
        x = x - self.subtract_value
        x = F.mish(x)
        x = F.leaky_relu(x, negative_slope=self.negative_slope)
        return x


batch_size = 32
in_channels = 64
out_channels = 128
height = 64
width = 64
kernel_size = 3
subtract_value = 0.5
negative_slope = 0.1


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, subtract_value, negative_slope]
