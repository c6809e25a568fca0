import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A matrix multiplication with a learned weight (x @ W^T), then min over dim 1, then subtract a constant, then tanh."""

    def __init__(self, in_features, out_features, subtract_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.subtract_value = subtract_value

    def forward(self, x):
        x = self.linear(x)
        x = torch.amin(x, dim=1, keepdim=True)
        x = x - self.subtract_value
        x = torch.tanh(x)
        return x


batch_size = 1024
in_features = 4096
out_features = 4096
subtract_value = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features) * (0.5 + torch.rand(batch_size, 1))]


def get_init_inputs():
    return [in_features, out_features, subtract_value]
