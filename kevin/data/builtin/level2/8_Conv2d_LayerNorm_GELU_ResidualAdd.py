import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 2D convolution (same padding), then layer norm over all but the batch dim, then GELU, then add the main op's output back (residual)."""

    def __init__(self, in_channels, out_channels, kernel_size, norm_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.layer_norm = nn.LayerNorm(norm_shape)

    def forward(self, x):
        x = self.conv(x)
        residual = x
        x = self.layer_norm(x)
        x = F.gelu(x)
        x = x + residual
        return x


batch_size = 32
in_channels = 64
out_channels = 128
height = 64
width = 64
kernel_size = 3
norm_shape = (out_channels, height, width)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, norm_shape]
