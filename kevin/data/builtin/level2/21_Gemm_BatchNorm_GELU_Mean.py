import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A GEMM (x @ W^T + b), then batch norm (running statistics), then GELU, then mean over dim 1."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.batch_norm = nn.BatchNorm1d(out_features)
        nn.init.uniform_(self.batch_norm.running_mean, -0.5, 0.5)
        nn.init.uniform_(self.batch_norm.running_var, 0.5, 2.0)
        nn.init.uniform_(self.batch_norm.weight, 0.5, 1.5)
        nn.init.uniform_(self.batch_norm.bias, -0.5, 0.5)

    def forward(self, x):
        x = self.linear(x)
        x = self.batch_norm(x)
        x = F.gelu(x)
        x = torch.mean(x, dim=1, keepdim=True)
        return x


batch_size = 1024
in_features = 4096
out_features = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features) * (0.5 + torch.rand(batch_size, 1))]


def get_init_inputs():
    return [in_features, out_features]
