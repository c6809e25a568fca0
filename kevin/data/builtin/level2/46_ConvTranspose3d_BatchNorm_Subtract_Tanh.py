import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 3D transposed convolution (stride 2), then batch norm (running statistics), then subtract a constant, then tanh."""

    def __init__(self, in_channels, out_channels, kernel_size, subtract_value):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1)
        self.batch_norm = nn.BatchNorm3d(out_channels)
        nn.init.uniform_(self.batch_norm.running_mean, -0.5, 0.5)
        nn.init.uniform_(self.batch_norm.running_var, 0.5, 2.0)
        nn.init.uniform_(self.batch_norm.weight, 0.5, 1.5)
        nn.init.uniform_(self.batch_norm.bias, -0.5, 0.5)
        self.subtract_value = subtract_value

    def forward(self, x):
        x = self.conv_transpose(x)
        x = self.batch_norm(x)
        x = x - self.subtract_value
        x = torch.tanh(x)
        return x


batch_size = 16
in_channels = 32
out_channels = 16
depth = 8
height = 16
width = 16
kernel_size = 3
subtract_value = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, subtract_value]
