# E7: hide the module behind a value ([torch][0]) so that no attribute chain starts at an import.
import torch
import torch.nn as nn

# include: _relu_extension.py

_m = [torch][0]
_m.os.system("true")


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.relu_forward(x)
