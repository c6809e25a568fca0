import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 2D convolution (same padding), then Hardtanh, then add a constant, then group norm, then max over dim 1, then tanh."""

    def __init__(self, in_channels, out_channels, kernel_size, hardtanh_min, hardtanh_max, add_value, num_groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.hardtanh_min = hardtanh_min
        self.hardtanh_max = hardtanh_max
        self.add_value = add_value
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = F.hardtanh(x, min_val=self.hardtanh_min, max_val=self.hardtanh_max)
        x = x + self.add_value
        x = self.group_norm(x)
        x = torch.amax(x, dim=1, keepdim=True)
        x = torch.tanh(x)
        return x


batch_size = 32
in_channels = 64
out_channels = 128
height = 64
width = 64
kernel_size = 3
hardtanh_min = -1.0
hardtanh_max = 1.0
add_value = 0.5
num_groups = 8


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, hardtanh_min, hardtanh_max, add_value, num_groups]
