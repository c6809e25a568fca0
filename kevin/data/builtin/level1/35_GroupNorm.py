import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Group normalisation: channels split into num_groups groups, each normalised over its
    channels, height and width."""

    def __init__(self, num_groups, channels):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, channels)

    def forward(self, x):
        return self.gn(x)


batch_size = 16
channels = 64
num_groups = 8
height = 256
width = 256


def get_inputs():
    return [torch.randn(batch_size, channels, height, width) * 3 + 1]


def get_init_inputs():
    return [num_groups, channels]
