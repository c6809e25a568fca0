import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A GEMM (x @ W^T + b), then ReLU, then divide by a constant."""

    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        x = self.linear(x)
        x = torch.relu(x)
        x = x / self.divisor
        return x


batch_size = 1024
in_features = 4096
out_features = 4096
divisor = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_features) * (0.5 + torch.rand(batch_size, 1))]


def get_init_inputs():
    return [in_features, out_features, divisor]
