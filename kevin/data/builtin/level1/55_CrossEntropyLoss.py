import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Cross-entropy of logits against integer class targets, averaged over the batch."""

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


batch_size = 65536
num_classes = 1024


def get_inputs():
    scale = torch.rand(()) * 3 + 0.5  # a fresh logit scale per call
    logits = torch.randn(batch_size, num_classes) * torch.exp(torch.randn(batch_size, 1)) * scale
    targets = torch.randint(0, num_classes, (batch_size,))
    return [logits, targets]


def get_init_inputs():
    return []
