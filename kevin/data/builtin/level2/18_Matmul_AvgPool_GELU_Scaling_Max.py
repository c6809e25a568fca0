import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A matrix multiplication with a learned weight (x @ W^T), then avg pooling (kernel 2), then GELU, then scale by a constant, then max over dim 1."""

    def __init__(self, in_features, out_features, scale_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.scale_factor = scale_factor

    def forward(self, x):
        x = self.linear(x)
        x = F.avg_pool1d(x.unsqueeze(1), kernel_size=2).squeeze(1)
        x = F.gelu(x)
        x = x * self.scale_factor
        x = torch.amax(x, dim=1, keepdim=True)
        return x


batch_size = 1024
in_features = 4096
out_features = 4096
scale_factor = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_features) * (0.5 + torch.rand(batch_size, 1))]


def get_init_inputs():
    return [in_features, out_features, scale_factor]
