import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 2D transposed convolution (stride 2), then softmax over dim 1, then multiply by a learned per-feature tensor."""

    def __init__(self, in_channels, out_channels, kernel_size, multiplier_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1)
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))

    def forward(self, x):
        x = self.conv_transpose(x)
        x = torch.softmax(x, dim=1)
        x = x * self.multiplier
        return x


batch_size = 16
in_channels = 64
out_channels = 64
height = 64
width = 64
kernel_size = 3
multiplier_shape = (out_channels, 1, 1)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, multiplier_shape]
