# Crash containment (GPU): an out-of-bounds write, an illegal memory access.
import torch
import torch.nn as nn

# include: _cuda_hack_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = cuda_hack_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.relu_out_of_bounds(x)
