import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A matrix multiplication with a learned weight (x @ W^T), then batch norm (running statistics), then add a constant, then ReLU."""

    def __init__(self, in_features, out_features, add_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.batch_norm = nn.BatchNorm1d(out_features)
        nn.init.uniform_(self.batch_norm.running_mean, -0.5, 0.5)
        nn.init.uniform_(self.batch_norm.running_var, 0.5, 2.0)
        nn.init.uniform_(self.batch_norm.weight, 0.5, 1.5)
        nn.init.uniform_(self.batch_norm.bias, -0.5, 0.5)
        self.add_value = add_value

    def forward(self, x):
        x = self.linear(x)
        x = self.batch_norm(x)
        x = x + self.add_value
        x = torch.relu(x)
        return x


batch_size = 1024
in_features = 4096
out_features = 4096
add_value = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features) * (0.5 + torch.rand(batch_size, 1))]


def get_init_inputs():
    return [in_features, out_features, add_value]
