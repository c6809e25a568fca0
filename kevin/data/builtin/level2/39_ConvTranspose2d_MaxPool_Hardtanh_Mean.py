import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 2D transposed convolution (stride 2), then max pooling (kernel 2), then Hardtanh, then mean over dim 1."""

    def __init__(self, in_channels, out_channels, kernel_size, hardtanh_min, hardtanh_max):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1)
        self.hardtanh_min = hardtanh_min
        self.hardtanh_max = hardtanh_max

    def forward(self, x):
        x = self.conv_transpose(x)
        x = F.max_pool2d(x, kernel_size=2)
        x = F.hardtanh(x, min_val=self.hardtanh_min, max_val=self.hardtanh_max)
        x = torch.mean(x, dim=1, keepdim=True)
        return x


batch_size = 16
in_channels = 64
out_channels = 64
height = 64
width = 64
kernel_size = 3
hardtanh_min = -1.0
hardtanh_max = 1.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, hardtanh_min, hardtanh_max]
