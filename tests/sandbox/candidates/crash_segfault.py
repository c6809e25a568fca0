# Crash containment: dereference a null pointer inside forward.
import ctypes

import torch
import torch.nn as nn

# include: _relu_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctypes.string_at(0)
        return x
