import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Batch normalisation per channel with an affine transform. The sandbox runs models in
    training mode (as KernelBench does), so the batch statistics are used; the random running
    statistics matter only to a sandbox configured with ``train_mode=False``."""

    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        nn.init.uniform_(self.bn.running_mean, -1.0, 1.0)
        nn.init.uniform_(self.bn.running_var, 0.5, 2.0)
        nn.init.uniform_(self.bn.weight, 0.5, 1.5)
        nn.init.uniform_(self.bn.bias, -0.5, 0.5)

    def forward(self, x):
        return self.bn(x)


batch_size = 16
channels = 64
height = 256
width = 256


def get_inputs():
    return [torch.randn(batch_size, channels, height, width) * 3 + 1]


def get_init_inputs():
    return [channels]
