# A3: try the custom path, fall back to PyTorch when it fails (here it always fails).
import torch
import torch.nn as nn

# include: _relu_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            return self.ext.relu_forward_fast(x)
        except AttributeError:
            return torch.relu(x)
