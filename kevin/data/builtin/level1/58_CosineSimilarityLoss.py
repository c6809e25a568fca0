import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """mean(1 - cosine_similarity(predictions, targets)) over the rows."""

    def forward(self, predictions, targets):
        return torch.mean(1 - F.cosine_similarity(predictions, targets, dim=1))


batch_size = 16384
dim = 4096


def get_inputs():
    # targets mix the predictions (weight drawn per call in [-1, 1]) with noise
    mix = torch.rand(()) * 2 - 1
    predictions = torch.randn(batch_size, dim)
    targets = mix * predictions + 0.5 * torch.randn(batch_size, dim)
    return [predictions, targets]


def get_init_inputs():
    return []
