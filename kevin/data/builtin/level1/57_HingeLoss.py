import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Hinge loss mean(max(0, 1 - predictions * targets)) with targets in {-1, +1}."""

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


batch_size = 16384
dim = 4096


def get_inputs():
    scale = torch.rand(()) * 3 + 0.5  # a fresh scale per call
    predictions = torch.randn(batch_size, dim) * torch.exp(torch.randn(batch_size, 1)) * scale
    targets = torch.sign(torch.randn(batch_size, dim))
    return [predictions, targets]


def get_init_inputs():
    return []
