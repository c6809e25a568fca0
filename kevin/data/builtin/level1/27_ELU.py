import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """ELU: x if x > 0 else alpha * (exp(x) - 1)."""

    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.elu(x, alpha=self.alpha)


batch_size = 8192
dim = 16384
alpha = 1.0


def get_inputs():
    return [torch.randn(batch_size, dim) * 2]


def get_init_inputs():
    return [alpha]
