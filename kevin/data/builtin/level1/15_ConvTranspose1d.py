import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 1D transposed convolution with stride 2."""

    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)

    def forward(self, x):
        return self.conv_transpose(x)


batch_size = 32
in_channels = 64
out_channels = 64
kernel_size = 3
stride = 2
length = 8192


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride]
