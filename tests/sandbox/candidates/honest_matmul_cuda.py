# Honest: fp32 matmul by the shared tiled CUDA kernel.
import torch
import torch.nn as nn

# include: _cuda_honest_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = cuda_honest_extension

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.ext.matmul_forward(a, b)
