import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A GEMM (x @ W^T + b), then Hardtanh, then multiply by a learned per-feature tensor, then max over dim 1."""

    def __init__(self, in_features, out_features, hardtanh_min, hardtanh_max, multiplier_shape):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.hardtanh_min = hardtanh_min
        self.hardtanh_max = hardtanh_max
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))

    def forward(self, x):
        x = self.linear(x)
        x = F.hardtanh(x, min_val=self.hardtanh_min, max_val=self.hardtanh_max)
        x = x * self.multiplier
        x = torch.amax(x, dim=1, keepdim=True)
        return x


batch_size = 1024
in_features = 4096
out_features = 4096
hardtanh_min = -1.0
hardtanh_max = 1.0
multiplier_shape = (out_features,)


def get_inputs():
    return [torch.randn(batch_size, in_features) * (0.5 + torch.rand(batch_size, 1))]


def get_init_inputs():
    return [in_features, out_features, hardtanh_min, hardtanh_max, multiplier_shape]
