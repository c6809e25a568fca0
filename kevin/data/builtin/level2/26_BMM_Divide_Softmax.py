import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A batched matrix multiplication, then divide by a constant, then softmax over the last dim."""

    def __init__(self, divisor):
        super().__init__()
        self.divisor = divisor

    def forward(self, a, b):
        x = torch.bmm(a, b)
        x = x / self.divisor
        x = torch.softmax(x, dim=-1)
        return x


batch_size = 64
m = 512
k = 512
n = 512
divisor = 2.0


def get_inputs():
    return [torch.randn(batch_size, m, k) * (0.5 + torch.rand(batch_size, 1, 1)), torch.randn(batch_size, k, n) * (0.5 + torch.rand(batch_size, 1, 1))]


def get_init_inputs():
    return [divisor]
