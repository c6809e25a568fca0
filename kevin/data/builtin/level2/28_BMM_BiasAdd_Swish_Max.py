import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A batched matrix multiplication, then add a learned bias, then Swish (x * sigmoid(x)), then max over the last dim."""

    def __init__(self, bias_shape):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, a, b):
        x = torch.bmm(a, b)
        x = x + self.bias
        x = x * torch.sigmoid(x)
        x = torch.amax(x, dim=-1, keepdim=True)
        return x


batch_size = 64
m = 512
k = 512
n = 512
bias_shape = (n,)


def get_inputs():
    return [torch.randn(batch_size, m, k) * (0.5 + torch.rand(batch_size, 1, 1)), torch.randn(batch_size, k, n) * (0.5 + torch.rand(batch_size, 1, 1))]


def get_init_inputs():
    return [bias_shape]
