import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A GEMM (x @ W^T + b), then subtract a constant, then Mish, then max pooling (kernel 2), then add a learned bias, then min over dim 1."""

    def __init__(self, in_features, out_features, subtract_value, bias_shape):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.linear(x)
        x = x - self.subtract_value
        x = F.mish(x)
        x = F.max_pool1d(x.unsqueeze(1), kernel_size=2).squeeze(1)
        x = x + self.bias
        x = torch.amin(x, dim=1, keepdim=True)
        return x


batch_size = 1024
in_features = 4096
out_features = 4096
subtract_value = 0.5
bias_shape = (out_features // 2,)


def get_inputs():
    return [torch.randn(batch_size, in_features) * (0.5 + torch.rand(batch_size, 1))]


def get_init_inputs():
    return [in_features, out_features, subtract_value, bias_shape]
