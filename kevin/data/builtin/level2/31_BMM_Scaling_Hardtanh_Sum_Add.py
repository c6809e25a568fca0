import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A batched matrix multiplication, then scale by a constant, then Hardtanh, then sum over the last dim, then add a constant."""

    def __init__(self, scale_factor, hardtanh_min, hardtanh_max, add_value):
        super().__init__()
        self.scale_factor = scale_factor
        self.hardtanh_min = hardtanh_min
        self.hardtanh_max = hardtanh_max
        self.add_value = add_value

    def forward(self, a, b):
        x = torch.bmm(a, b)
        x = x * self.scale_factor
        x = F.hardtanh(x, min_val=self.hardtanh_min, max_val=self.hardtanh_max)
        x = torch.sum(x, dim=-1, keepdim=True)
        x = x + self.add_value
        return x


batch_size = 64
m = 512
k = 512
n = 512
scale_factor = 2.0
hardtanh_min = -1.0
hardtanh_max = 1.0
add_value = 0.5


def get_inputs():
    return [torch.randn(batch_size, m, k) * (0.5 + torch.rand(batch_size, 1, 1)), torch.randn(batch_size, k, n) * (0.5 + torch.rand(batch_size, 1, 1))]


def get_init_inputs():
    return [scale_factor, hardtanh_min, hardtanh_max, add_value]
