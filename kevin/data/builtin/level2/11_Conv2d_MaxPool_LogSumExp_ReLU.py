import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 2D convolution (same padding), then max pooling (kernel 2), then log-sum-exp over dim 1, then ReLU."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        x = self.conv(x)
        x = F.max_pool2d(x, kernel_size=2)
        x = torch.logsumexp(x, dim=1, keepdim=True)
        x = torch.relu(x)
        return x


batch_size = 32
in_channels = 64
out_channels = 128
height = 64
width = 64
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
