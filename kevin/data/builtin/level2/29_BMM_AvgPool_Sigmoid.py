import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A batched matrix multiplication, then avg pooling (kernel 2), then sigmoid."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        x = torch.bmm(a, b)
        x = F.avg_pool1d(x, kernel_size=2)
        x = torch.sigmoid(x)
        return x


batch_size = 64
m = 512
k = 512
n = 512


def get_inputs():
    return [torch.randn(batch_size, m, k) * (0.5 + torch.rand(batch_size, 1, 1)), torch.randn(batch_size, k, n) * (0.5 + torch.rand(batch_size, 1, 1))]


def get_init_inputs():
    return []
