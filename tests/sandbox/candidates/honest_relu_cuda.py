# Honest: ReLU by the shared element-wise CUDA kernel.
import torch
import torch.nn as nn

# include: _cuda_honest_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = cuda_honest_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.relu_forward(x)
