import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 3D transposed convolution (stride 2), then ReLU, then global average pooling, then scale by a constant."""

    def __init__(self, in_channels, out_channels, kernel_size, scale_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1)
        self.scale_factor = scale_factor

    def forward(self, x):
        x = self.conv_transpose(x)
        x = torch.relu(x)
        x = torch.mean(x, dim=(2, 3, 4), keepdim=True)
        x = x * self.scale_factor
        return x


batch_size = 16
in_channels = 32
out_channels = 16
depth = 8
height = 16
width = 16
kernel_size = 3
scale_factor = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale_factor]
