# E2: exit with status 0 in the middle of the checks.
import os

import torch
import torch.nn as nn

# include: _relu_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os._exit(0)
