import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 1D convolution (no padding)."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return self.conv(x)


batch_size = 32
in_channels = 64
out_channels = 128
kernel_size = 3
length = 16384


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
