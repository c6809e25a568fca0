import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Hardtanh: x clamped to [min_val, max_val]."""

    def __init__(self, min_val, max_val):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x):
        return F.hardtanh(x, min_val=self.min_val, max_val=self.max_val)


batch_size = 8192
dim = 16384
min_val = -1.0
max_val = 1.0


def get_inputs():
    return [torch.randn(batch_size, dim) * 2]


def get_init_inputs():
    return [min_val, max_val]
