import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A batched matrix multiplication, then layer norm over the last dim, then ReLU."""

    def __init__(self, norm_shape):
        super().__init__()
        self.layer_norm = nn.LayerNorm(norm_shape)

    def forward(self, a, b):
        x = torch.bmm(a, b)
        x = self.layer_norm(x)
        x = torch.relu(x)
        return x


batch_size = 64
m = 512
k = 512
n = 512
norm_shape = (n,)


def get_inputs():
    return [torch.randn(batch_size, m, k) * (0.5 + torch.rand(batch_size, 1, 1)), torch.randn(batch_size, k, n) * (0.5 + torch.rand(batch_size, 1, 1))]


def get_init_inputs():
    return [norm_shape]
