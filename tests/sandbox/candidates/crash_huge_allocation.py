# Crash containment: allocate far more memory than the machine has (16 GiB, then touch it).
import torch
import torch.nn as nn

# include: _relu_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hog = torch.ones(16 * 2**30, dtype=torch.uint8)
        return self.ext.relu_forward(x) + hog[0]
