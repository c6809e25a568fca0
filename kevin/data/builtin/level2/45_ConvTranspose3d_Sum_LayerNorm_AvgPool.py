import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 3D transposed convolution (stride 2), then sum over dim 1, then layer norm over all but the batch dim, then avg pooling (kernel 2)."""

    def __init__(self, in_channels, out_channels, kernel_size, norm_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1)
        self.layer_norm = nn.LayerNorm(norm_shape)

    def forward(self, x):
        x = self.conv_transpose(x)
        x = torch.sum(x, dim=1, keepdim=True)
        x = self.layer_norm(x)
        x = F.avg_pool3d(x, kernel_size=2)
        return x


batch_size = 16
in_channels = 32
out_channels = 16
depth = 8
height = 16
width = 16
kernel_size = 3
norm_shape = (1, depth * 2, height * 2, width * 2)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width) * (0.5 + torch.rand(batch_size, 1, 1, 1, 1))]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, norm_shape]
