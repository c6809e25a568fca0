import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A GEMM (x @ W^T + b), then group norm, then HardSwish, then add a learned bias."""

    def __init__(self, in_features, out_features, num_groups, bias_shape):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.linear(x)
        x = self.group_norm(x)
        x = F.hardswish(x)
        x = x + self.bias
        return x


batch_size = 1024
in_features = 4096
out_features = 4096
num_groups = 8
bias_shape = (out_features,)


def get_inputs():
    return [torch.randn(batch_size, in_features) * (0.5 + torch.rand(batch_size, 1))]


def get_init_inputs():
    return [in_features, out_features, num_groups, bias_shape]
