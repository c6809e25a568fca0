import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A matrix multiplication with a learned weight (x @ W^T), then layer norm over all but the batch dim, then GELU."""

    def __init__(self, in_features, out_features, norm_shape):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.layer_norm = nn.LayerNorm(norm_shape)

    def forward(self, x):
        x = self.linear(x)
        x = self.layer_norm(x)
        x = F.gelu(x)
        return x


batch_size = 1024
in_features = 4096
out_features = 4096
norm_shape = (out_features,)


def get_inputs():
    return [torch.randn(batch_size, in_features) * (0.5 + torch.rand(batch_size, 1))]


def get_init_inputs():
    return [in_features, out_features, norm_shape]
