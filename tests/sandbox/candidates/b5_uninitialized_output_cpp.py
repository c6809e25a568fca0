# B5: return torch::empty_like from C++ without writing it, hoping for a stale result in that memory.
import torch
import torch.nn as nn

# include: _hack_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = hack_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.uninitialized_like(x)
