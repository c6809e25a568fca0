# A2: the "kernel" is a C++ call into ATen (torch::relu) instead of a hand-written loop.
import torch
import torch.nn as nn

# include: _hack_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = hack_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.aten_relu(x)
