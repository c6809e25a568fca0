# E7: start a process through the subprocess module that torch.utils.cpp_extension imported, under an alias.
import torch
import torch.nn as nn
import torch.utils.cpp_extension as ce

# include: _relu_extension.py

ce.subprocess.run(["true"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.relu_forward(x)
