import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 2D transposed convolution that doubles height and width (stride 2, padding 1,
    output_padding 1)."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(
            in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1
        )

    def forward(self, x):
        return self.conv_transpose(x)


batch_size = 16
in_channels = 64
out_channels = 64
kernel_size = 3
height = 64
width = 64


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
