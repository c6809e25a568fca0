import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A matrix multiplication with a learned weight (x @ W^T), then scale by a constant, then add the main op's output back (residual), then clamp."""

    def __init__(self, in_features, out_features, scale_factor, clamp_min, clamp_max):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.scale_factor = scale_factor
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        x = self.linear(x)
        residual = x
        x = x * self.scale_factor
        x = x + residual
        x = torch.clamp(x, min=self.clamp_min, max=self.clamp_max)
        return x


batch_size = 1024
in_features = 4096
out_features = 4096
scale_factor = 2.0
clamp_min = -1.0
clamp_max = 1.0


def get_inputs():
    return [torch.randn(batch_size, in_features) * (0.5 + torch.rand(batch_size, 1))]


def get_init_inputs():
    return [in_features, out_features, scale_factor, clamp_min, clamp_max]
