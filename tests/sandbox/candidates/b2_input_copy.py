# B2: the same identity shortcut without aliasing: a copy of the input.
import torch
import torch.nn as nn

# include: _relu_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()
