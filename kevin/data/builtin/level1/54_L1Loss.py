import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mean absolute error."""

    def forward(self, predictions, targets):
        return torch.mean(torch.abs(predictions - targets))


batch_size = 16384
dim = 4096


def heavy_tailed(*shape):
    """Normal values times a log-normal scale per row: heavy tails, different in every row."""
    return torch.randn(*shape) * torch.exp(torch.randn(shape[0], 1))


def get_inputs():
    scale = torch.rand(()) * 3 + 0.5  # a fresh scale per call
    predictions = heavy_tailed(batch_size, dim) * scale
    targets = heavy_tailed(batch_size, dim) * scale
    return [predictions, targets]


def get_init_inputs():
    return []
