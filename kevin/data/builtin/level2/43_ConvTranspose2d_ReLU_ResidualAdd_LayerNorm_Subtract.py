import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 2D transposed convolution (stride 2), then ReLU, then add the main op's output back (residual), then layer norm over all but the batch dim, then subtract a constant."""

    def __init__(self, in_channels, out_channels, kernel_size, norm_shape, subtract_value):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1)
        self.layer_norm = nn.LayerNorm(norm_shape)
        self.subtract_value = subtract_value

    def forward(self, x):
        x = self.conv_transpose(x)
        residual = x
        x = torch.relu(x)
        x = x + residual
        x = self.layer_norm(x)
        x = x - self.subtract_value
        return x


batch_size = 16
in_channels = 64
out_channels = 64
height = 64
width = 64
kernel_size = 3
norm_shape = (out_channels, height * 2, width * 2)
subtract_value = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, norm_shape, subtract_value]
