# E2: exit with status 0 while being loaded, hoping a clean exit code reads as success.
import os

import torch
import torch.nn as nn

# include: _relu_extension.py

os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x
