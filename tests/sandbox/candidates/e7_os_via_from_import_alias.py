# E7: `from torch.utils.cpp_extension import os as o`: os.system under a name no rule knew.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import os as o

# include: _relu_extension.py

o.system("true")


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.relu_forward(x)
